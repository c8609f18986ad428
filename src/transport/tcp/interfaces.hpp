// Which network interface the TCP transport listens on. LOOM_SOCKET_IFNAME follows
// NCCL_SOCKET_IFNAME: a comma list of name prefixes ("eth,ib"), "^" in front excludes them
// ("^docker,lo"), "=" in front makes the names exact ("=eth0"). Without it, loopback and
// docker-like interfaces are skipped unless every rank runs on this one host, where loopback is
// the natural choice.
#pragma once

#include <string>
#include <vector>

namespace loom {

struct NetInterface {
  std::string name;     // "eth0"
  std::string address;  // numeric, no port
  bool ipv6 = false;
  bool loopback = false;
};

class InterfaceFilter {
 public:
  // Throws loomInvalidArgument for a spec with no names ("^", "=", ",").
  explicit InterfaceFilter(const std::string& spec);
  bool matches(const std::string& name) const;
  bool empty() const { return names_.empty(); }

 private:
  std::vector<std::string> names_;
  bool exclude_ = false;
  bool exact_ = false;
};

// Every interface that is up and has an IPv4 or routable IPv6 address (IPv6 link-local needs a
// scope other hosts cannot know), in the kernel's order.
std::vector<NetInterface> listInterfaces();

// The interface to listen on: the first match of the spec (empty: the default rule above),
// IPv4 before IPv6. Throws loomInvalidArgument naming the interfaces there are if none fits.
NetInterface chooseInterface(const std::vector<NetInterface>& available, const std::string& spec,
                             bool allRanksOnThisHost);

}  // namespace loom
