#include "bench_report.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace loom::bench {
namespace {

// Widths of the table's columns; the header is printed with the same widths as the rows.
constexpr const char* kFixedFormat = "%12s  %12s  %8s  %6s  %6s";
constexpr const char* kPassFormat = "  %7s  %6s  %6s %6s";
constexpr const char* kPeerFormat = "  %7s  %7s  %6s";

std::string formatTime(double us) {
  char text[32];
  if (us >= 10000.0) {
    std::snprintf(text, sizeof(text), "%.0f", us);
  } else if (us >= 100.0) {
    std::snprintf(text, sizeof(text), "%.1f", us);
  } else {
    std::snprintf(text, sizeof(text), "%.2f", us);
  }
  return text;
}

std::string formatFixed(double v, int decimals) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.*f", decimals, v);
  return text;
}

}  // namespace

Reporter::Reporter(const BenchOptions& options, int nranks, ReportLayout layout)
    : opts_(options), nranks_(nranks), layout_(std::move(layout)), table_(!options.csv) {}

Reporter::~Reporter() {
  if (ownsCsv_) std::fclose(csv_);
}

bool Reporter::open() {
  if (opts_.csv) {
    csv_ = stdout;
    // Under loomrun, whose prefix ("[0] ") would break the CSV, write to loomrun's own stdout:
    // "FD:INODE", used only while our stdout is still the pipe INODE loomrun reads.
    const char* raw = std::getenv("LOOMRUN_STDOUT_FD");
    struct stat out {};
    unsigned long long inode = 0;
    int fd = -1;
    if (raw != nullptr && std::sscanf(raw, "%d:%llu", &fd, &inode) == 2 &&
        ::fstat(STDOUT_FILENO, &out) == 0 && S_ISFIFO(out.st_mode) && out.st_ino == inode) {
      int copy = ::dup(fd);
      FILE* raw = copy >= 0 ? ::fdopen(copy, "w") : nullptr;
      if (raw != nullptr) {
        csv_ = raw;
        ownsCsv_ = true;
      } else if (copy >= 0) {
        ::close(copy);
      }
    }
    return true;
  }
  if (opts_.csvPath.empty()) return true;
  csv_ = std::fopen(opts_.csvPath.c_str(), "w");
  if (csv_ == nullptr) {
    std::fprintf(stderr, "loom-bench: cannot write %s: %s\n", opts_.csvPath.c_str(),
                 std::strerror(errno));
    return false;
  }
  ownsCsv_ = true;
  return true;
}

void Reporter::header() {
  if (csv_ != nullptr) {
    std::fprintf(csv_,
                 "op,nranks,bytes,count,dtype,redop,root,algo,oop_us,oop_algbw,oop_busbw,"
                 "oop_wrong,ip_us,ip_algbw,ip_busbw,ip_wrong");
    if (layout_.deviceColumns) {
      std::fprintf(csv_,
                   ",device,graph,oop_nccl_us,oop_nccl_algbw,oop_nccl_busbw,oop_time_ratio,"
                   "ip_nccl_us,ip_nccl_algbw,ip_nccl_busbw,ip_time_ratio");
    }
    std::fprintf(csv_, "\n");
    std::fflush(csv_);
  }
  if (table_) tableHeader();
}

void Reporter::tableHeader() const {
  int version = 0;
  loomGetVersion(&version);
  std::printf("# loom-bench %s nranks %d version %d.%d.%d\n", benchOpName(opts_.op), nranks_,
              version / 10000, version / 100 % 100, version % 100);
  std::printf(
      "# minBytes %zu maxBytes %zu step: %g(factor) warmup iters: %d iters: %d "
      "validation: %d\n",
      opts_.minBytes, opts_.maxBytes, opts_.stepFactor, opts_.warmupIters, opts_.iters,
      opts_.check ? 1 : 0);
  if (opts_.aggIters > 1 || opts_.blocking || opts_.average != 3) {
    static const char* const kAverage[] = {"rank 0", "mean", "fastest rank", "slowest rank"};
    std::printf("# agg iters: %d blocking: %d time: %s\n", opts_.aggIters, opts_.blocking ? 1 : 0,
                kAverage[opts_.average]);
  }
  if (!layout_.rankLines.empty()) {
    std::printf("#\n# Using devices\n");
    for (const std::string& line : layout_.rankLines) std::printf("#  %s\n", line.c_str());
  }
  if (!layout_.runsOn.empty()) std::printf("# %s\n", layout_.runsOn.c_str());
  if (!layout_.deviceLine.empty()) std::printf("%s\n", layout_.deviceLine.c_str());
  std::printf("#\n");
  if (layout_.peer) {
    // Each pass is 32 + 26 characters wide here; the titles are centred over their pass.
    std::printf("#%51s%35s%56s\n", "", "out-of-place", "in-place");
  } else {
    // Widths: the fixed columns take 52 characters, each pass 32 (see the formats above).
    std::printf("#%51s%22s%32s\n", "", "out-of-place", "in-place");
  }
  std::printf("#%11s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  for (int i = 0; i < 2; ++i) {
    std::printf(kPassFormat, "time", "algbw", "busbw", "#wrong");
    if (layout_.peer) std::printf(kPeerFormat, "nccl", "ncclbw", "l/n");
  }
  std::printf("  algo\n");
  std::printf("#%11s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  if (layout_.peer) {
    for (int i = 0; i < 2; ++i) {
      std::printf(kPassFormat, "(us)", "(GB/s)", "(GB/s)", "");
      std::printf(kPeerFormat, "(us)", "(GB/s)", "(time)");
    }
    std::printf("\n");
  } else {
    std::printf(kPassFormat, "(us)", "(GB/s)", "(GB/s)", "");
    std::printf("  %7s  %6s  %6s\n", "(us)", "(GB/s)", "(GB/s)");
  }
  std::fflush(stdout);
}

void Reporter::row(const Row& row) {
  for (const PassResult* p : {&row.oop, &row.ip}) {
    if (p->ran) {
      busbwSum_ += p->busbw;
      ++busbwCount_;
    }
    if (p->peer.ran) {
      peerBusbwSum_ += p->peer.busbw;
      ++peerBusbwCount_;
    }
  }
  if (csv_ != nullptr) csvRow(row);
  if (table_) tableRow(row);
  rows_.push_back(row);
}

void Reporter::csvRow(const Row& row) const {
  const char* redop = benchOpReduces(opts_.op) ? redOpName(row.redop) : "none";
  const std::string root = benchOpHasRoot(opts_.op) ? std::to_string(opts_.root) : "-1";
  auto pass = [&](const PassResult& p) {
    if (!p.ran) return std::string("nan,nan,nan,nan");
    return formatFixed(p.seconds * 1e6, 3) + "," + formatFixed(p.algbw, 4) + "," +
           formatFixed(p.busbw, 4) + "," + (p.checked ? std::to_string(p.wrong) : "nan");
  };
  std::fprintf(csv_, "%s,%d,%zu,%zu,%s,%s,%s,%s,%s,%s", benchOpName(opts_.op), nranks_, row.bytes,
               row.elems, typeName(row.dtype), redop, root.c_str(), row.algo, pass(row.oop).c_str(),
               pass(row.ip).c_str());
  if (layout_.deviceColumns) {
    auto peer = [&](const PassResult& p) {
      if (!p.ran || !p.peer.ran) return std::string("nan,nan,nan,nan");
      return formatFixed(p.peer.seconds * 1e6, 3) + "," + formatFixed(p.peer.algbw, 4) + "," +
             formatFixed(p.peer.busbw, 4) + "," + formatFixed(p.seconds / p.peer.seconds, 4);
    };
    std::fprintf(csv_, ",%s,%d,%s,%s", layout_.deviceName.c_str(), layout_.graph ? 1 : 0,
                 peer(row.oop).c_str(), peer(row.ip).c_str());
  }
  std::fprintf(csv_, "\n");
  std::fflush(csv_);
}

void Reporter::tableRow(const Row& row) const {
  const char* redop = benchOpReduces(opts_.op) ? redOpName(row.redop) : "none";
  const std::string root = benchOpHasRoot(opts_.op) ? std::to_string(opts_.root) : "-1";
  auto wrongText = [](const PassResult& p) {
    return p.checked ? std::to_string(p.wrong) : std::string("N/A");
  };
  std::printf(kFixedFormat, std::to_string(row.bytes).c_str(), std::to_string(row.elems).c_str(),
              typeName(row.dtype), redop, root.c_str());
  for (const PassResult* p : {&row.oop, &row.ip}) {
    if (!p->ran) {
      std::printf(kPassFormat, "N/A", "N/A", "N/A", "N/A");
    } else {
      std::printf(kPassFormat, formatTime(p->seconds * 1e6).c_str(),
                  formatFixed(p->algbw, 2).c_str(), formatFixed(p->busbw, 2).c_str(),
                  wrongText(*p).c_str());
    }
    if (!layout_.peer) continue;
    if (!p->ran || !p->peer.ran) {
      std::printf(kPeerFormat, "N/A", "N/A", "N/A");
    } else {
      std::printf(kPeerFormat, formatTime(p->peer.seconds * 1e6).c_str(),
                  formatFixed(p->peer.busbw, 2).c_str(),
                  formatFixed(p->seconds / p->peer.seconds, 2).c_str());
    }
  }
  std::printf("  %s\n", row.algo);
  std::fflush(stdout);
}

bool Reporter::footer(int64_t totalWrong) {
  if (table_) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(totalWrong),
                totalWrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth    : %g GB/s\n", busbwCount_ ? busbwSum_ / busbwCount_ : 0.0);
    if (layout_.peer) {
      std::printf("# Avg NCCL bus bandwidth: %g GB/s\n",
                  peerBusbwCount_ ? peerBusbwSum_ / peerBusbwCount_ : 0.0);
    }
    std::printf("#\n");
    std::fflush(stdout);
  }
  bool ok = true;
  if (!opts_.jsonPath.empty()) ok = writeJson(opts_.jsonPath, totalWrong) && ok;
  written_ = ok;
  return ok;
}

namespace {
std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof(escape), "\\u%04x", c);
      out += escape;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// JSON has no NaN: a pass that did not run is null.
std::string jsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", v);
  return text;
}

std::string jsonPass(const PassResult& p, bool peer, const std::string& peerName) {
  if (!p.ran) return "null";
  std::string out = "{\"time_us\": " + jsonNumber(p.seconds * 1e6) +
                    ", \"algbw_gbs\": " + jsonNumber(p.algbw) +
                    ", \"busbw_gbs\": " + jsonNumber(p.busbw) +
                    ", \"wrong\": " + (p.checked ? std::to_string(p.wrong) : std::string("null"));
  if (peer && p.peer.ran) {
    out += ", " + jsonString(peerName) + ": {\"time_us\": " + jsonNumber(p.peer.seconds * 1e6) +
           ", \"algbw_gbs\": " + jsonNumber(p.peer.algbw) +
           ", \"busbw_gbs\": " + jsonNumber(p.peer.busbw) + "}";
  }
  return out + "}";
}
}  // namespace

// The shape of nccl-tests' -J output: the run's parameters, then one object per size.
bool Reporter::writeJson(const std::string& path, int64_t totalWrong) const {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "loom-bench: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  int version = 0;
  loomGetVersion(&version);
  std::fprintf(f, "{\n  \"tool\": \"loom-bench\",\n  \"version\": \"%d.%d.%d\",\n", version / 10000,
               version / 100 % 100, version % 100);
  std::fprintf(f,
               "  \"config\": {\"op\": %s, \"nranks\": %d, \"minbytes\": %zu, "
               "\"maxbytes\": %zu, \"stepfactor\": %g, \"iters\": %d, \"warmup_iters\": %d, "
               "\"agg_iters\": %d, \"blocking\": %d, \"average\": %d, \"check\": %d, "
               "\"device\": %s, \"graph\": %d, \"peer\": %s},\n",
               jsonString(benchOpName(opts_.op)).c_str(), nranks_, opts_.minBytes, opts_.maxBytes,
               opts_.stepFactor, opts_.iters, opts_.warmupIters, opts_.aggIters,
               opts_.blocking ? 1 : 0, opts_.average, opts_.check ? 1 : 0,
               jsonString(layout_.deviceName).c_str(), layout_.graph ? 1 : 0,
               layout_.peer ? jsonString(layout_.peerName).c_str() : "null");
  std::fprintf(f, "  \"runs_on\": %s,\n  \"ranks\": [", jsonString(layout_.runsOn).c_str());
  for (size_t i = 0; i < layout_.rankLines.size(); ++i) {
    std::fprintf(f, "%s%s", i ? ", " : "", jsonString(layout_.rankLines[i]).c_str());
  }
  std::fprintf(f, "],\n  \"results\": [\n");
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    std::fprintf(f,
                 "    {\"size\": %zu, \"count\": %zu, \"type\": %s, \"redop\": %s, "
                 "\"root\": %d, \"algo\": %s, \"out_of_place\": %s, \"in_place\": %s}%s\n",
                 r.bytes, r.elems, jsonString(typeName(r.dtype)).c_str(),
                 jsonString(benchOpReduces(opts_.op) ? redOpName(r.redop) : "none").c_str(),
                 benchOpHasRoot(opts_.op) ? opts_.root : -1, jsonString(r.algo).c_str(),
                 jsonPass(r.oop, layout_.peer, layout_.peerName).c_str(),
                 jsonPass(r.ip, layout_.peer, layout_.peerName).c_str(),
                 i + 1 < rows_.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"wrong\": %lld,\n  \"avg_busbw_gbs\": %s",
               static_cast<long long>(totalWrong),
               jsonNumber(busbwCount_ ? busbwSum_ / busbwCount_ : 0.0).c_str());
  if (layout_.peer) {
    std::fprintf(f, ",\n  \"avg_peer_busbw_gbs\": %s",
                 jsonNumber(peerBusbwCount_ ? peerBusbwSum_ / peerBusbwCount_ : 0.0).c_str());
  }
  std::fprintf(f, "\n}\n");
  const bool ok = std::fclose(f) == 0;
  if (!ok) std::fprintf(stderr, "loom-bench: cannot write %s\n", path.c_str());
  return ok;
}

// nccl-tests' "Rank N ... Pid P on HOST device D" lines, gathered from every rank over `comm`
// (a host communicator); rank 0's alone where that fails.
std::vector<std::string> rankLines(loomComm_t comm, int rank, int nranks, const std::string& device,
                                   std::string* runsOn) {
  constexpr size_t kRecord = 192;
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  std::vector<char> mine(kRecord, 0);
  std::snprintf(mine.data(), kRecord, "%s\t%d\t%s", host, static_cast<int>(getpid()),
                device.c_str());
  std::vector<char> all(kRecord * static_cast<size_t>(nranks), 0);
  std::vector<std::string> lines;
  if (loomAllGather(mine.data(), all.data(), kRecord, loomChar, comm, nullptr) != loomSuccess) {
    all.assign(mine.begin(), mine.end());
    nranks = 1;
    rank = 0;
  }
  std::vector<std::string> hosts;
  for (int r = 0; r < nranks; ++r) {
    std::string record(all.data() + static_cast<size_t>(r) * kRecord);
    size_t tab1 = record.find('\t');
    size_t tab2 = record.find('\t', tab1 + 1);
    std::string rhost = record.substr(0, tab1);
    if (std::find(hosts.begin(), hosts.end(), rhost) == hosts.end()) hosts.push_back(rhost);
    char line[320];
    std::snprintf(line, sizeof(line), "Rank %2d Pid %7s on %10s device %s", r,
                  record.substr(tab1 + 1, tab2 - tab1 - 1).c_str(), rhost.c_str(),
                  record.substr(tab2 + 1).c_str());
    lines.push_back(line);
  }
  (void)rank;
  *runsOn += std::to_string(hosts.size()) + (hosts.size() == 1 ? " host" : " hosts");
  return lines;
}

}  // namespace loom::bench
