// loom-bench --plot: the run's JSON (-J) drawn as busbw against size by the python3 on PATH,
// with matplotlib. python3 runs with its arguments as they are (fork and exec, no shell between),
// so the script's quotes and any file name reach it intact.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_report.hpp"

namespace loom::bench {
namespace {

constexpr const char* kScript = R"PY(
import json, sys
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(f"loom-bench: --plot needs matplotlib for {sys.executable}: "
             f"{sys.executable} -m pip install matplotlib")
run = json.load(open(sys.argv[1]))
cfg, rows = run["config"], [r for r in run["results"] if r["out_of_place"]]
fig, ax = plt.subplots(figsize=(8, 5))
ax.plot([r["size"] for r in rows], [r["out_of_place"]["busbw_gbs"] for r in rows], "o-",
        label="loom")
peer = cfg.get("peer")
if peer:
    pts = [(r["size"], r["out_of_place"][peer]["busbw_gbs"]) for r in rows
           if peer in r["out_of_place"]]
    if pts:
        ax.plot(*zip(*pts), "s--", label=peer)
ax.set_xscale("log", base=2)
ax.set_xlabel("size (bytes)")
ax.set_ylabel("bus bandwidth (GB/s)")
ax.set_title(f"{cfg['op']}, {cfg['nranks']} ranks, {cfg['device']}: {run['runs_on']}")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.savefig(sys.argv[2], dpi=120, bbox_inches="tight")
print(f"# plot: {sys.argv[2]}")
)PY";

// python3's exit status, or -1 where it could not run; quiet: its output goes to /dev/null.
int runPython(const std::vector<std::string>& args, bool quiet) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (quiet) {
      std::FILE* null = std::freopen("/dev/null", "w", stdout);
      if (null != nullptr) dup2(STDOUT_FILENO, STDERR_FILENO);
    }
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  pid_t done;
  while ((done = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  return done == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The python3 that PATH finds (what a venv's activation puts first), for the hint.
std::string pythonOnPath() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate =
        (end > start ? dirs.substr(start, end - start) : std::string(".")) + "/python3";
    start = end + 1;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

bool plotReady(std::string* why) {
  if (runPython({"python3", "-c", "import matplotlib"}, true) == 0) return true;
  const std::string python = pythonOnPath();
  if (python.empty()) {
    *why = "--plot needs python3 with matplotlib; no python3 is on PATH";
    return false;
  }
  // Debian's package serves the system's python3 only: a virtual environment's never sees it.
  *why = "--plot needs matplotlib for " + python + " (the python3 on PATH): " + python +
         " -m pip install matplotlib";
  if (python.rfind("/usr/bin/", 0) == 0) *why += " (or: apt-get install python3-matplotlib)";
  return false;
}

bool drawPlot(const std::string& json, const std::string& png) {
  return runPython({"python3", "-c", kScript, json, png}, false) == 0;
}

}  // namespace loom::bench
