// Raw TCP throughput between two hosts (or two network namespaces): the bound that Loom's
// inter-node bandwidth is compared with. The client sends each message split evenly over S
// parallel connections; the server reads it whole on every connection and answers one byte
// per connection; the time from the first send to the last answer is one iteration.
//
//   tcp_bw server PORT STREAMS              serves one client, then exits
//   tcp_bw client HOST PORT STREAMS [MINBYTES MAXBYTES ITERS [bidir]]   (defaults 64K 256M 20)
//
// The client prints CSV: streams,bytes,us,GBps (GB = 1e9 bytes, as loom-bench's busbw) for
// message sizes MINBYTES, x4, ... MAXBYTES, after one warm-up iteration per size. With "bidir"
// the server sends the same bytes back at the same time and GBps is per direction: the bound
// for a ring, whose links carry traffic both ways at once (on a small VM both directions share
// the same CPUs, so this bound is lower than the one-way one).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_STREAMS 64
#define CONNECT_TRIES 200  // x 50 ms: the server may start a little after the client

static const uint64_t kBidir = 1ull << 63;

static void die(const char* what) {
  fprintf(stderr, "tcp_bw: %s: %s\n", what, strerror(errno));
  exit(1);
}

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void read_full(int fd, void* buf, size_t n) {
  char* p = buf;
  while (n > 0) {
    ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      if (got == 0) errno = ECONNRESET;
      die("read");
    }
    p += got;
    n -= (size_t)got;
  }
}

// Moves sendWant[i] bytes out of and recvWant[i] bytes into connection i, on every connection at
// once and in both directions at once, so that one slow connection does not stall the others.
static void move_all(int* fds, int n, const uint64_t* sendWant, const uint64_t* recvWant, char* buf,
                     size_t bufsize) {
  uint64_t sent[MAX_STREAMS] = {0}, recvd[MAX_STREAMS] = {0};
  struct pollfd pfds[MAX_STREAMS];
  while (1) {
    int np = 0;
    int which[MAX_STREAMS];
    for (int i = 0; i < n; ++i) {
      short events =
          (short)((sent[i] < sendWant[i] ? POLLOUT : 0) | (recvd[i] < recvWant[i] ? POLLIN : 0));
      if (events == 0) continue;
      pfds[np].fd = fds[i];
      pfds[np].events = events;
      which[np++] = i;
    }
    if (np == 0) return;
    if (poll(pfds, (nfds_t)np, 30000) <= 0) {
      if (errno == 0) errno = ETIMEDOUT;
      die("poll (peer silent for 30 s?)");
    }
    for (int k = 0; k < np; ++k) {
      int i = which[k];
      if (pfds[k].revents & (POLLIN | POLLERR | POLLHUP)) {
        uint64_t left = recvWant[i] - recvd[i];
        ssize_t got = recv(fds[i], buf, left < bufsize ? (size_t)left : bufsize, MSG_DONTWAIT);
        if (got == 0) errno = ECONNRESET;
        if (got <= 0 && errno != EAGAIN && errno != EINTR) die("recv");
        if (got > 0) recvd[i] += (uint64_t)got;
      }
      if ((pfds[k].revents & POLLOUT) && sent[i] < sendWant[i]) {
        uint64_t left = sendWant[i] - sent[i];
        ssize_t put =
            send(fds[i], buf, left < bufsize ? (size_t)left : bufsize, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (put < 0 && errno != EAGAIN && errno != EINTR) die("send");
        if (put > 0) sent[i] += (uint64_t)put;
      }
    }
  }
}

static int serve(int port, int streams) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(lfd, (struct sockaddr*)&addr, sizeof(addr)) != 0) die("bind");
  if (listen(lfd, MAX_STREAMS) != 0) die("listen");
  int fds[MAX_STREAMS];
  for (int i = 0; i < streams; ++i) {
    fds[i] = accept(lfd, NULL, NULL);
    if (fds[i] < 0) die("accept");
    set_nodelay(fds[i]);
  }
  close(lfd);
  size_t bufsize = 4 << 20;
  char* buf = malloc(bufsize);
  if (buf == NULL) die("malloc");
  while (1) {
    // Each message starts with its per-connection byte counts; a zero count on connection 0
    // from a closed client ends the run.
    // The top bit of a count asks for the same number of bytes back at the same time.
    uint64_t want[MAX_STREAMS] = {0}, back[MAX_STREAMS] = {0};
    for (int i = 0; i < streams; ++i) {
      ssize_t got = recv(fds[i], &want[i], sizeof(want[i]), MSG_WAITALL);
      if (got == 0 && i == 0) return 0;
      if (got != (ssize_t)sizeof(want[i])) die("recv header");
      back[i] = (want[i] & kBidir) ? want[i] & ~kBidir : 0;
      want[i] &= ~kBidir;
    }
    move_all(fds, streams, back, want, buf, bufsize);
    char ack = 1;
    for (int i = 0; i < streams; ++i) {
      if (send(fds[i], &ack, 1, MSG_NOSIGNAL) != 1) die("send ack");
    }
  }
}

static uint64_t parse_size(const char* text) {
  char* end = NULL;
  double v = strtod(text, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (uint64_t)v;
}

static int run_client(const char* host, int port, int streams, uint64_t minb, uint64_t maxb,
                      int iters, int bidir) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo* ai = NULL;
  char service[16];
  snprintf(service, sizeof(service), "%d", port);
  if (getaddrinfo(host, service, &hints, &ai) != 0 || ai == NULL) {
    fprintf(stderr, "tcp_bw: cannot resolve %s\n", host);
    return 1;
  }
  int fds[MAX_STREAMS];
  for (int i = 0; i < streams; ++i) {
    int tries = 0;
    while (1) {
      fds[i] = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fds[i], ai->ai_addr, ai->ai_addrlen) == 0) break;
      close(fds[i]);
      if (++tries >= CONNECT_TRIES) die("connect");
      usleep(50000);
    }
    set_nodelay(fds[i]);
  }
  freeaddrinfo(ai);
  size_t bufsize = 4 << 20;
  char* buf = malloc(bufsize);
  if (buf == NULL) die("malloc");
  memset(buf, 0x5a, bufsize);
  printf("streams,bytes,us,GBps\n");
  for (uint64_t bytes = minb; bytes <= maxb; bytes *= 4) {
    uint64_t want[MAX_STREAMS], header[MAX_STREAMS], back[MAX_STREAMS];
    for (int i = 0; i < streams; ++i) {
      want[i] = bytes / (uint64_t)streams + ((uint64_t)i < bytes % (uint64_t)streams);
      header[i] = want[i] | (bidir ? kBidir : 0);
      back[i] = bidir ? want[i] : 0;
    }
    double best = 1e30;
    double total = 0;
    for (int it = -1; it < iters; ++it) {
      double t0 = now_sec();
      for (int i = 0; i < streams; ++i) {
        if (send(fds[i], &header[i], sizeof(header[i]), MSG_NOSIGNAL) != sizeof(header[i])) {
          die("send header");
        }
      }
      move_all(fds, streams, want, back, buf, bufsize);
      for (int i = 0; i < streams; ++i) {
        char ack;
        read_full(fds[i], &ack, 1);
      }
      double dt = now_sec() - t0;
      if (it >= 0) {  // iteration -1 warms up connections and buffers
        total += dt;
        if (dt < best) best = dt;
      }
    }
    double avg = total / iters;
    printf("%d,%llu,%.2f,%.3f\n", streams, (unsigned long long)bytes, avg * 1e6,
           (double)bytes / avg / 1e9);
    fflush(stdout);
    if (bytes > UINT64_MAX / 4) break;
  }
  for (int i = 0; i < streams; ++i) close(fds[i]);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 4 && strcmp(argv[1], "server") == 0) {
    int streams = atoi(argv[3]);
    if (streams < 1 || streams > MAX_STREAMS) {
      fprintf(stderr, "tcp_bw: STREAMS must be 1..%d\n", MAX_STREAMS);
      return 2;
    }
    return serve(atoi(argv[2]), streams);
  }
  if (argc >= 5 && strcmp(argv[1], "client") == 0) {
    int streams = atoi(argv[4]);
    uint64_t minb = argc > 5 ? parse_size(argv[5]) : 64 << 10;
    uint64_t maxb = argc > 6 ? parse_size(argv[6]) : 256 << 20;
    int iters = argc > 7 ? atoi(argv[7]) : 20;
    int bidir = argc > 8 && strcmp(argv[8], "bidir") == 0;
    if (streams < 1 || streams > MAX_STREAMS || minb < (uint64_t)streams || maxb < minb ||
        iters < 1) {
      fprintf(stderr,
              "tcp_bw: need 1 <= STREAMS <= %d, STREAMS <= MINBYTES <= MAXBYTES, "
              "ITERS >= 1\n",
              MAX_STREAMS);
      return 2;
    }
    return run_client(argv[2], atoi(argv[3]), streams, minb, maxb, iters, bidir);
  }
  fprintf(stderr,
          "usage: tcp_bw server PORT STREAMS\n"
          "       tcp_bw client HOST PORT STREAMS [MINBYTES MAXBYTES ITERS [bidir]]\n");
  return 2;
}
