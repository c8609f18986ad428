#include "device/plugin/plugin_library.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "base/error.hpp"

namespace loom {

namespace {

// The fields every version of the table starts with.
struct TableHeader {
  uint32_t version;
  uint32_t size;
};

bool validKind(const char* kind) {
  if (kind == nullptr || *kind == '\0') return false;
  for (const char* c = kind; *c != '\0'; ++c)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'))
      return false;
  return std::strcmp(kind, "cpu") != 0 && std::strcmp(kind, "cuda") != 0;
}

// Torch names device types in lower case; cpu and cuda are served without a plug-in.
bool validTorchType(const char* type) {
  if (*type == '\0' || (*type >= '0' && *type <= '9')) return false;
  for (const char* c = type; *c != '\0'; ++c)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_')) return false;
  return std::strcmp(type, "cpu") != 0 && std::strcmp(type, "cuda") != 0 &&
         std::strcmp(type, "meta") != 0;
}

// Version 1's table is a prefix of version 2's: one copy routine reads both.
static_assert(offsetof(loomDevicePlugin_v1, launchHostFunc) ==
              offsetof(loomDevicePlugin_v2, launchHostFunc));
static_assert(sizeof(loomDevicePlugin_v1) == offsetof(loomDevicePlugin_v2, torchDeviceType));

// The bytes of the table a plug-in of `header` provides: at least its version's base, and no
// more than this Loom knows of that version (a later release may append entries).
size_t tableBytes(const std::string& path, const TableHeader& header) {
  LOOM_CHECK_ARG(header.version >= 1 && header.version <= LOOM_DEVICE_PLUGIN_VERSION,
                 "device plug-in ", path, ": it implements device plug-in ABI version ",
                 header.version, ", this Loom implements versions 1 to ",
                 LOOM_DEVICE_PLUGIN_VERSION);
  const bool v1 = header.version == 1;
  const size_t least = v1 ? LOOM_DEVICE_PLUGIN_V1_BASE_SIZE : LOOM_DEVICE_PLUGIN_V2_BASE_SIZE;
  const size_t most = v1 ? sizeof(loomDevicePlugin_v1) : sizeof(loomDevicePlugin_v2);
  // Entries appended to a version later are optional: a table that ends before them (a plug-in
  // built against an older header) leaves them zero, that is absent.
  LOOM_CHECK_ARG(header.size >= least, "device plug-in ", path, ": its table is ", header.size,
                 " bytes, version ", header.version, " needs at least ", least);
  return std::min<size_t>(header.size, most);
}

}  // namespace

PluginLibrary::PluginLibrary(std::string path, void* handle)
    : path_(std::move(path)), handle_(handle) {}

PluginLibrary::~PluginLibrary() {
  if (table_.finalize != nullptr) table_.finalize();
}

std::unique_ptr<PluginLibrary> PluginLibrary::open(const std::string& path) {
  LOOM_CHECK_ARG(!path.empty(), "device plug-in: empty path");
  // RTLD_LOCAL: two plug-ins may use the same symbol names inside.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    LOOM_THROW(loomInvalidArgument, "device plug-in ", path, ": cannot load it (",
               why != nullptr ? why : "unknown reason", ")");
  }
  std::unique_ptr<PluginLibrary> lib(new PluginLibrary(path, handle));
  const void* symbol = dlsym(handle, LOOM_DEVICE_PLUGIN_SYMBOL);
  LOOM_CHECK_ARG(symbol != nullptr, "device plug-in ", path, ": it exports no ",
                 LOOM_DEVICE_PLUGIN_SYMBOL, " (not a Loom device plug-in?)");
  TableHeader header;
  std::memcpy(&header, symbol, sizeof(header));
  std::memcpy(&lib->table_, symbol, tableBytes(path, header));
  const loomDevicePlugin_v2& t = lib->table_;
  LOOM_CHECK_ARG(validKind(t.kind), "device plug-in ", path, ": kind '",
                 t.kind == nullptr ? "(null)" : t.kind,
                 "' must be [a-z0-9_-]+ and not a built-in kind");
  lib->kind_ = t.kind;
  lib->vendor_ = t.vendor != nullptr ? t.vendor : t.kind;
  const std::pair<const void*, const char*> required[] = {
      {reinterpret_cast<const void*>(t.init), "init"},
      {reinterpret_cast<const void*>(t.getDeviceCount), "getDeviceCount"},
      {reinterpret_cast<const void*>(t.getDeviceInfo), "getDeviceInfo"},
      {reinterpret_cast<const void*>(t.memAlloc), "memAlloc"},
      {reinterpret_cast<const void*>(t.memFree), "memFree"},
      {reinterpret_cast<const void*>(t.memIsDevice), "memIsDevice"},
      {reinterpret_cast<const void*>(t.streamCreate), "streamCreate"},
      {reinterpret_cast<const void*>(t.streamDestroy), "streamDestroy"},
      {reinterpret_cast<const void*>(t.streamSynchronize), "streamSynchronize"},
      {reinterpret_cast<const void*>(t.memcpyAsync), "memcpyAsync"},
      {reinterpret_cast<const void*>(t.eventCreate), "eventCreate"},
      {reinterpret_cast<const void*>(t.eventDestroy), "eventDestroy"},
      {reinterpret_cast<const void*>(t.eventRecord), "eventRecord"},
      {reinterpret_cast<const void*>(t.streamWaitEvent), "streamWaitEvent"},
      {reinterpret_cast<const void*>(t.eventQuery), "eventQuery"},
  };
  for (const auto& [entry, name] : required)
    LOOM_CHECK_ARG(entry != nullptr, "device plug-in ", path, " (kind ", lib->kind_,
                   "): required entry ", name, " is NULL");
  LOOM_CHECK_ARG((t.hostAlloc == nullptr) == (t.hostFree == nullptr), "device plug-in ", path,
                 ": hostAlloc and hostFree come together");
  LOOM_CHECK_ARG(t.torchStream == nullptr || t.torchDeviceType != nullptr, "device plug-in ", path,
                 ": torchStream without torchDeviceType");
  LOOM_CHECK_ARG(t.torchDeviceType == nullptr || validTorchType(t.torchDeviceType),
                 "device plug-in ", path, ": torchDeviceType '", t.torchDeviceType,
                 "' must be a torch device type name ([a-z_][a-z0-9_]*), not cpu, cuda or meta");
  LOOM_CHECK_ARG((t.memExport == nullptr) == (t.memImport == nullptr) &&
                     (t.memImport == nullptr) == (t.memCloseImport == nullptr),
                 "device plug-in ", path,
                 ": memExport, memImport and memCloseImport come together");
  // finalize only after a successful init.
  void (*finalize)(void) = lib->table_.finalize;
  lib->table_.finalize = nullptr;
  lib->check(t.init(), "init");
  lib->table_.finalize = finalize;
  return lib;
}

void PluginLibrary::check(loomResult_t result, const char* entry) const {
  if (result == loomSuccess) return;
  const char* message = table_.getLastError != nullptr ? table_.getLastError() : nullptr;
  loomResult_t code = result > loomSuccess && result < loomNumResults && result != loomInProgress
                          ? result
                          : loomSystemError;
  LOOM_THROW(code, "device plug-in ", kind_, " (", path_, "): ", entry, " failed (code ",
             static_cast<int>(result), ")",
             message != nullptr && *message != '\0' ? std::string(": ") + message : "");
}

}  // namespace loom
