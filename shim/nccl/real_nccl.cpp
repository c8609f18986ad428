#include "real_nccl.hpp"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <vector>

#include "shim_env.hpp"

namespace loom::nccl_shim {
namespace {

bool sameFile(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

std::string ownPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) == 0 || info.dli_fname == nullptr)
    return "";
  return info.dli_fname;
}

void addGlob(const std::string& pattern, std::vector<std::string>* out) {
  glob_t found{};
  if (glob(pattern.c_str(), 0, nullptr, &found) == 0)
    for (size_t i = 0; i < found.gl_pathc; ++i) out->emplace_back(found.gl_pathv[i]);
  globfree(&found);
}

// "<...>/site-packages/" prefixes of the libraries loaded in the process.
int collectSitePackages(struct dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name == nullptr) return 0;
  std::string name = info->dlpi_name;
  for (const char* marker : {"/site-packages/", "/dist-packages/"}) {
    size_t at = name.find(marker);
    if (at == std::string::npos) continue;
    std::string candidate =
        name.substr(0, at + std::string(marker).size()) + "nvidia/nccl/lib/libnccl.so.2";
    bool known = false;
    for (const std::string& c : *out) known |= c == candidate;
    if (!known) out->push_back(candidate);
  }
  return 0;
}

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  dl_iterate_phdr(collectSitePackages, &out);
  // The running python's prefix: <prefix>/bin/python* as it was started (argv[0], which keeps a
  // venv's own path), and as the kernel resolved it; and an activated venv's.
  std::vector<std::string> prefixes;
  if (const char* venv = std::getenv("VIRTUAL_ENV"); venv != nullptr && *venv != '\0')
    prefixes.emplace_back(venv);
  auto addPrefixOf = [&](const std::string& program) {
    size_t bin = program.rfind("/bin/");
    if (bin != std::string::npos && program.find("python", bin) != std::string::npos)
      prefixes.push_back(program.substr(0, bin));
  };
  if (FILE* cmdline = std::fopen("/proc/self/cmdline", "rb")) {
    char argv0[4096] = {};
    size_t n = std::fread(argv0, 1, sizeof(argv0) - 1, cmdline);
    std::fclose(cmdline);
    argv0[n] = '\0';
    addPrefixOf(argv0);
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) addPrefixOf(std::string(exe, static_cast<size_t>(n)));
  for (const std::string& prefix : prefixes)
    addGlob(prefix + "/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2", &out);
  if (const char* paths = std::getenv("LD_LIBRARY_PATH")) {
    std::stringstream list(paths);
    for (std::string dir; std::getline(list, dir, ':');)
      if (!dir.empty()) out.push_back(dir + "/libnccl.so.2");
  }
  out.emplace_back("libnccl.so.2");  // the loader's own search (ld.so.cache)
  for (const char* dir : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib",
                          "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/lib", "/usr/lib"})
    out.push_back(std::string(dir) + "/libnccl.so.2");
  return out;
}

template <typename Fn>
void resolve(void* handle, const char* symbol, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
}

// Loads one candidate; an empty string on success, else why not.
std::string tryLoad(const std::string& path, const std::string& self, RealNccl* lib) {
  if (path.find('/') != std::string::npos) {
    if (access(path.c_str(), R_OK) != 0) return "not found";
    if (!self.empty() && sameFile(path, self)) return "is this shim itself";
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (handle == nullptr) {
    const char* why = dlerror();
    return why != nullptr ? why : "dlopen failed";
  }
  void* version = dlsym(handle, "ncclGetVersion");
  if (version == reinterpret_cast<void*>(&ncclGetVersion)) {
    dlclose(handle);
    return "is this shim itself";
  }
  RealNccl loaded;
  loaded.path = path;
#define LOOM_NCCL_REAL_RESOLVE(name) resolve(handle, "nccl" #name, &loaded.name);
  LOOM_NCCL_REAL_FUNCTIONS(LOOM_NCCL_REAL_RESOLVE)
  LOOM_NCCL_REAL_FUNCTIONS_2_32(LOOM_NCCL_REAL_RESOLVE)
#undef LOOM_NCCL_REAL_RESOLVE
  resolve(handle, "ncclDevCommCreate", &loaded.DevCommCreate);
  resolve(handle, "ncclDevCommDestroy", &loaded.DevCommDestroy);
  if (loaded.GetUniqueId == nullptr || loaded.CommInitRank == nullptr ||
      loaded.CommDestroy == nullptr || loaded.GroupStart == nullptr || loaded.GroupEnd == nullptr ||
      loaded.AllReduce == nullptr) {
    dlclose(handle);
    return "lacks NCCL's core entry points (ncclGetUniqueId, ncclCommInitRank, ...)";
  }
  if (loaded.GetVersion == nullptr || loaded.GetVersion(&loaded.version) != ncclSuccess)
    loaded.version = 0;
  *lib = loaded;
  return "";
}

struct Loader {
  std::mutex mutex;
  bool tried = false;
  RealNccl lib;
  bool ok = false;
  std::string why;
};

}  // namespace

const RealNccl* realNccl(std::string* why) {
  static Loader loader;
  std::lock_guard<std::mutex> lock(loader.mutex);
  if (!loader.tried) {
    loader.tried = true;
    const std::string named = env::fallbackPath();
    const std::string self = ownPath();
    std::vector<std::string> list;
    if (named == "off" || named == "0" || named == "none") {
      loader.why = "the fallback is off (LOOM_NCCL_FALLBACK=" + named + ")";
    } else if (!named.empty()) {
      list.push_back(named);  // the only one: another NCCL than the one asked for would mislead
    } else {
      list = candidates();
    }
    std::string reasons;
    for (const std::string& path : list) {
      std::string failure = tryLoad(path, self, &loader.lib);
      if (failure.empty()) {
        loader.ok = true;
        break;
      }
      reasons += "\n  " + path + ": " + failure;
    }
    if (!loader.ok && loader.why.empty())
      loader.why = "no real NCCL found (set LOOM_NCCL_FALLBACK=/path/to/libnccl.so.2):" + reasons;
    if (loader.ok && env::infoEnabled())
      std::fprintf(stderr, "loom-nccl INFO real NCCL %d for fallback: %s\n", loader.lib.version,
                   loader.lib.path.c_str());
  }
  if (!loader.ok) {
    if (why != nullptr) *why = loader.why;
    return nullptr;
  }
  return &loader.lib;
}

}  // namespace loom::nccl_shim
