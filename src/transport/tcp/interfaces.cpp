#include "transport/tcp/interfaces.hpp"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <sstream>

#include "base/error.hpp"
#include "bootstrap/socket.hpp"

namespace loom {

namespace {

bool startsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Bridges of container runtimes and hypervisors: reachable from this host only.
bool isContainerBridge(const std::string& name) {
  return startsWith(name, "docker") || startsWith(name, "virbr") || startsWith(name, "br-") ||
         startsWith(name, "cni") || startsWith(name, "podman");
}

}  // namespace

InterfaceFilter::InterfaceFilter(const std::string& spec) {
  std::string rest = spec;
  if (startsWith(rest, "^")) exclude_ = true, rest.erase(0, 1);
  if (startsWith(rest, "=")) exact_ = true, rest.erase(0, 1);
  std::stringstream items(rest);
  std::string item;
  while (std::getline(items, item, ','))
    if (!item.empty()) names_.push_back(item);
  LOOM_CHECK_ARG(!spec.empty() == !names_.empty(), "LOOM_SOCKET_IFNAME='", spec,
                 "' names no interface (syntax: eth,ib | ^docker,lo | =eth0)");
}

bool InterfaceFilter::matches(const std::string& name) const {
  bool listed = false;
  for (const std::string& n : names_) listed |= exact_ ? name == n : startsWith(name, n);
  return listed != exclude_;
}

std::vector<NetInterface> listInterfaces() {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || (ifa->ifa_flags & IFF_UP) == 0) continue;
    int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (family == AF_INET6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr)->sin6_addr))
      continue;
    NetInterface itf;
    itf.name = ifa->ifa_name;
    itf.ipv6 = family == AF_INET6;
    itf.address = numericHost(ifa->ifa_addr, itf.ipv6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    itf.loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(itf);
  }
  freeifaddrs(list);
  return out;
}

NetInterface chooseInterface(const std::vector<NetInterface>& available, const std::string& spec,
                             bool allRanksOnThisHost) {
  InterfaceFilter filter(spec);
  auto fits = [&](const NetInterface& itf) {
    if (!filter.empty()) return filter.matches(itf.name);
    if (allRanksOnThisHost) return true;
    return !itf.loopback && !isContainerBridge(itf.name);
  };
  // One host: loopback first, it needs no route. Otherwise IPv4 first.
  bool preferLoopback = allRanksOnThisHost && filter.empty();
  auto preference = [&](const NetInterface& itf) {
    return (preferLoopback && itf.loopback ? 0 : 2) + (itf.ipv6 ? 1 : 0);
  };
  const NetInterface* best = nullptr;
  for (const NetInterface& itf : available)
    if (fits(itf) && (best == nullptr || preference(itf) < preference(*best))) best = &itf;
  if (best != nullptr) return *best;
  std::string names;
  for (const NetInterface& itf : available) names += (names.empty() ? "" : ", ") + itf.name;
  LOOM_THROW(loomInvalidArgument, "no network interface fits ",
             spec.empty() ? std::string("the default rule (not loopback, not docker-like)")
                          : "LOOM_SOCKET_IFNAME='" + spec + "'",
             "; interfaces up: ", names.empty() ? "none" : names);
}

}  // namespace loom
