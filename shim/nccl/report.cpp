#include "report.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "shim_env.hpp"

namespace loom::nccl_shim {
namespace {

constexpr int kEntries = static_cast<int>(Entry::kCount);

// One object for the process: its destructor prints the report at exit.
class Report {
 public:
  Report() : enabled_(env::report()) {}
  ~Report() {
    if (!enabled_) return;
    std::string text = "loom-nccl report (pid " + std::to_string(getpid()) + ")";
    bool any = false;
    for (int e = 0; e < kEntries; ++e) {
      long loom = counts_[e][0].load(), nccl = counts_[e][1].load(), errors = counts_[e][2].load();
      if (loom + nccl + errors == 0) continue;
      any = true;
      text += "\n  nccl" + std::string(entryName(static_cast<Entry>(e))) + ": loom " +
              std::to_string(loom) + ", nccl " + std::to_string(nccl) + ", failed " +
              std::to_string(errors);
    }
    if (!any) text += "\n  no NCCL calls";
    std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
  }
  void count(Entry entry, Route route) {
    if (enabled_)
      counts_[static_cast<int>(entry)][static_cast<int>(route)].fetch_add(
          1, std::memory_order_relaxed);
  }

 private:
  bool enabled_;
  std::atomic<long> counts_[kEntries][3] = {};
};

Report& report() {
  static Report instance;
  return instance;
}
// Made at load time, so that it is destroyed (and prints) after every communicator's user.
[[maybe_unused]] Report& forceInit = report();

}  // namespace

void count(Entry entry, Route route) { report().count(entry, route); }

const char* entryName(Entry entry) {
  static const char* const names[] = {
#define LOOM_NCCL_ENTRY_NAME(name) #name,
      LOOM_NCCL_ENTRIES(LOOM_NCCL_ENTRY_NAME)
#undef LOOM_NCCL_ENTRY_NAME
  };
  return names[static_cast<int>(entry)];
}

}  // namespace loom::nccl_shim
