// Holds the packets an nftables rule queues (`queue num Q`) for a random time, then lets them go:
// reordering in the kernel for every protocol alike (TCP and UDP), where the kernel has no netem.
// Talks nfnetlink_queue directly (no libnetfilter_queue), copies no payload (NFQNL_COPY_META) and
// takes GSO packets whole (NFQA_CFG_F_GSO), as the output hook sees them: a TCP segment of up to
// 64 KiB, a train of UDP datagrams. Runs until killed, in the network namespace it is started in.
//
// Usage: nfq_delay QUEUE MAX_US     each queued packet waits uniformly 0..MAX_US microseconds
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kMaxHeld = 65536 };

struct Held {
  uint64_t due;
  uint32_t id;
};

static int sock;
static uint16_t queue;

static uint64_t nowUs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

// Appends one attribute to the message at buf (its nlmsg_len grows).
static void attr(char* buf, uint16_t type, const void* data, uint16_t len) {
  struct nlmsghdr* nh = (struct nlmsghdr*)buf;
  struct nlattr* a = (struct nlattr*)(buf + NLMSG_ALIGN(nh->nlmsg_len));
  a->nla_type = type;
  a->nla_len = (uint16_t)(NLA_HDRLEN + len);
  memcpy((char*)a + NLA_HDRLEN, data, len);
  nh->nlmsg_len = NLMSG_ALIGN(nh->nlmsg_len) + NLA_ALIGN(a->nla_len);
}

static char* begin(char* buf, uint16_t msg) {
  memset(buf, 0, 256);
  struct nlmsghdr* nh = (struct nlmsghdr*)buf;
  nh->nlmsg_len = NLMSG_LENGTH(sizeof(struct nfgenmsg));
  nh->nlmsg_type = (uint16_t)((NFNL_SUBSYS_QUEUE << 8) | msg);
  nh->nlmsg_flags = NLM_F_REQUEST;
  struct nfgenmsg* g = (struct nfgenmsg*)NLMSG_DATA(nh);
  g->nfgen_family = AF_UNSPEC;
  g->version = NFNETLINK_V0;
  g->res_id = htons(queue);
  return buf;
}

static void sendOrDie(char* buf, const char* what) {
  struct nlmsghdr* nh = (struct nlmsghdr*)buf;
  struct sockaddr_nl to = {.nl_family = AF_NETLINK};
  if (sendto(sock, buf, nh->nlmsg_len, 0, (struct sockaddr*)&to, sizeof(to)) < 0) {
    fprintf(stderr, "nfq_delay: %s: %s\n", what, strerror(errno));
    exit(1);
  }
}

static void verdict(uint32_t id) {
  char buf[256];
  begin(buf, NFQNL_MSG_VERDICT);
  struct nfqnl_msg_verdict_hdr v = {.verdict = htonl(NF_ACCEPT), .id = htonl(id)};
  attr(buf, NFQA_VERDICT_HDR, &v, sizeof(v));
  sendOrDie(buf, "verdict");
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: nfq_delay QUEUE MAX_US\n");
    return 2;
  }
  queue = (uint16_t)atoi(argv[1]);
  const uint64_t maxUs = strtoull(argv[2], NULL, 10);
  sock = socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER);
  if (sock < 0) {
    perror("nfq_delay: socket");
    return 1;
  }
  int big = 8 << 20;
  setsockopt(sock, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
  char buf[256];
  struct nfqnl_msg_config_cmd cmd = {.command = NFQNL_CFG_CMD_BIND};
  begin(buf, NFQNL_MSG_CONFIG);
  attr(buf, NFQA_CFG_CMD, &cmd, sizeof(cmd));
  sendOrDie(buf, "bind");
  struct nfqnl_msg_config_params params = {.copy_range = 0, .copy_mode = NFQNL_COPY_META};
  begin(buf, NFQNL_MSG_CONFIG);
  attr(buf, NFQA_CFG_PARAMS, &params, sizeof(params));
  uint32_t maxLen = htonl(8192), flags = htonl(NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN);
  attr(buf, NFQA_CFG_QUEUE_MAXLEN, &maxLen, sizeof(maxLen));
  attr(buf, NFQA_CFG_FLAGS, &flags, sizeof(flags));
  attr(buf, NFQA_CFG_MASK, &flags, sizeof(flags));
  sendOrDie(buf, "configure");

  static struct Held held[kMaxHeld];
  size_t count = 0;
  uint64_t seed = nowUs() ^ (uint64_t)getpid() << 32;
  static char msg[1 << 16];
  for (;;) {
    // Let go of what is due; the rest waits (a small list: a linear scan is enough).
    uint64_t now = nowUs(), next = UINT64_MAX;
    for (size_t i = 0; i < count;) {
      if (held[i].due <= now) {
        verdict(held[i].id);
        held[i] = held[--count];
      } else {
        if (held[i].due < next) next = held[i].due;
        ++i;
      }
    }
    struct pollfd p = {.fd = sock, .events = POLLIN};
    uint64_t waitUs = next == UINT64_MAX ? 100000 : next - now;
    struct timespec ts = {(time_t)(waitUs / 1000000), (long)(waitUs % 1000000) * 1000};
    if (ppoll(&p, 1, &ts, NULL) <= 0) continue;
    ssize_t n = recv(sock, msg, sizeof(msg), MSG_DONTWAIT);
    if (n < 0) continue;  // ENOBUFS: the kernel dropped notifications (fail-open accepts)
    for (struct nlmsghdr* nh = (struct nlmsghdr*)msg; NLMSG_OK(nh, (size_t)n);
         nh = NLMSG_NEXT(nh, n)) {
      if ((nh->nlmsg_type & 0xff) != NFQNL_MSG_PACKET) continue;
      struct nlattr* a = (struct nlattr*)((char*)NLMSG_DATA(nh) + NLMSG_ALIGN(sizeof(struct nfgenmsg)));
      int left = (int)(nh->nlmsg_len - NLMSG_LENGTH(sizeof(struct nfgenmsg)));
      for (; left >= NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= left;
           left -= NLA_ALIGN(a->nla_len), a = (struct nlattr*)((char*)a + NLA_ALIGN(a->nla_len))) {
        if ((a->nla_type & NLA_TYPE_MASK) != NFQA_PACKET_HDR) continue;
        struct nfqnl_msg_packet_hdr* h = (struct nfqnl_msg_packet_hdr*)((char*)a + NLA_HDRLEN);
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t wait = maxUs == 0 ? 0 : (seed >> 33) % (maxUs + 1);
        if (count == kMaxHeld) {
          verdict(ntohl(h->packet_id));
        } else {
          held[count].due = nowUs() + wait;
          held[count].id = ntohl(h->packet_id);
          ++count;
        }
      }
    }
  }
}
