#include "device/registry.hpp"

#include <cstdlib>
#include <sstream>

#include "base/env.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "device/plugin/plugin_library.hpp"

namespace loom {

DeviceRegistry& DeviceRegistry::process() {
  static DeviceRegistry* registry = new DeviceRegistry();  // never destroyed: see the header
  return *registry;
}

DeviceRegistry::DeviceRegistry() { registerBuiltinDevices(*this); }

void DeviceRegistry::add(const std::string& kind, DeviceFactory factory,
                         const std::string& origin) {
  for (Entry& e : entries_) {
    if (e.kind != kind) continue;
    LOOM_CHECK_ARG(!e.unavailable.empty(), "device kind '", kind, "' of ", origin,
                   " is already provided by ", e.origin);
    e = Entry{kind, origin, "", std::move(factory)};
    return;
  }
  entries_.push_back(Entry{kind, origin, "", std::move(factory)});
}

void DeviceRegistry::addUnavailable(const std::string& kind, const std::string& why) {
  entries_.push_back(Entry{kind, "built in", why, nullptr});
}

std::pair<std::string, int> parseDeviceSpec(const std::string& spec) {
  size_t colon = spec.find(':');
  if (colon == std::string::npos) return {spec, -1};
  const std::string digits = spec.substr(colon + 1);
  char* end = nullptr;
  long value = std::strtol(digits.c_str(), &end, 10);
  LOOM_CHECK_ARG(
      !digits.empty() && end != nullptr && *end == '\0' && value >= 0 && value < (1 << 20),
      "device '", spec, "': expected KIND or KIND:N with N a device ordinal");
  return {spec.substr(0, colon), static_cast<int>(value)};
}

std::unique_ptr<Device> DeviceRegistry::create(const std::string& spec) {
  const std::string kind = parseDeviceSpec(spec.empty() ? "cpu" : spec).first;
  DeviceFactory factory;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    loadEnvPluginsLocked();
    for (const Entry& e : entries_) {
      if (e.kind != kind) continue;
      LOOM_CHECK_ARG(e.unavailable.empty(), "device '", spec, "': ", e.unavailable);
      factory = e.factory;
    }
  }
  if (!factory) {
    std::ostringstream known;
    for (const std::string& k : kinds()) known << (known.tellp() > 0 ? ", " : "") << k;
    LOOM_THROW(loomInvalidArgument, "unknown device '", spec, "': known kinds are ", known.str(),
               " (another kind needs its plug-in: LOOM_DEVICE_PLUGIN=/path/lib.so or "
               "loomDevicePluginLoad)");
  }
  return factory(spec.empty() ? "cpu" : spec);
}

void DeviceRegistry::loadPlugin(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex_);
  loadEnvPluginsLocked();
  loadPluginLocked(path);
}

void DeviceRegistry::loadPluginLocked(const std::string& path) {
  for (const auto& p : plugins_)
    if (p->path() == path) return;
  std::unique_ptr<PluginLibrary> library = PluginLibrary::open(path);
  for (const Entry& e : entries_)
    LOOM_CHECK_ARG(e.kind != library->kind() || !e.unavailable.empty(), "device plug-in ", path,
                   ": kind '", library->kind(), "' is already provided by ", e.origin);
  PluginLibrary* raw = library.get();
  add(
      raw->kind(), [raw](const std::string& spec) { return raw->createDevice(spec); }, path);
  plugins_.push_back(std::move(library));
  LOOM_INFO(kSubsysInit, -1, "device plug-in ", path, ": kind ", raw->kind(), ", vendor ",
            raw->vendor());
}

void DeviceRegistry::loadEnvPluginsLocked() {
  // A plug-in named in the environment that fails to load fails every communicator, not only
  // the first: the user asked for it.
  if (envError_) throw *envError_;
  if (envLoaded_) return;
  envLoaded_ = true;
  std::stringstream paths(env::devicePlugins());
  std::string path;
  try {
    while (std::getline(paths, path, ','))
      if (!path.empty()) loadPluginLocked(path);
  } catch (const Error& e) {
    envError_ = Error(e.code(), std::string(e.what()) + " (from LOOM_DEVICE_PLUGIN)");
    throw *envError_;
  }
}

std::vector<const PluginLibrary*> DeviceRegistry::plugins() {
  std::lock_guard<std::mutex> lock(mutex_);
  loadEnvPluginsLocked();
  std::vector<const PluginLibrary*> out;
  for (const auto& p : plugins_) out.push_back(p.get());
  return out;
}

std::vector<std::string> DeviceRegistry::kinds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const Entry& e : entries_)
    if (e.unavailable.empty()) out.push_back(e.kind);
  return out;
}

}  // namespace loom
