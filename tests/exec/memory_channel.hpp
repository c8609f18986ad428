// An in-process channel for executor tests: a bounded single-producer single-consumer ring of
// bytes with the Channel contract (8-byte granular transfers, padding), shared by two threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "transport/channel.hpp"

namespace loom::test {

struct MemoryRing {
  explicit MemoryRing(size_t capacity) : data(capacity) {}
  std::vector<char> data;
  std::atomic<uint64_t> head{0}, tail{0};
};

class MemoryChannel final : public Channel {
 public:
  MemoryChannel(int peer, std::shared_ptr<MemoryRing> out, std::shared_ptr<MemoryRing> in)
      : peer_(peer), out_(std::move(out)), in_(std::move(in)) {}
  int peer() const override { return peer_; }
  size_t trySend(const void* data, size_t bytes) override {
    if (bytes == 0) return 0;
    const size_t capacity = out_->data.size();
    const uint64_t head = out_->head.load(std::memory_order_relaxed);
    const uint64_t tail = out_->tail.load(std::memory_order_acquire);
    const size_t take = std::min(capacity - static_cast<size_t>(head - tail), roundUp8(bytes));
    if (take == 0) return 0;
    const size_t real = std::min(take, bytes);
    for (size_t i = 0; i < take; ++i)
      out_->data[(head + i) % capacity] = i < real ? static_cast<const char*>(data)[i] : 0;
    out_->head.store(head + take, std::memory_order_release);
    return real;
  }
  std::span<const char> peek(size_t maxBytes) override {
    const size_t capacity = in_->data.size();
    const uint64_t tail = in_->tail.load(std::memory_order_relaxed);
    const size_t avail = static_cast<size_t>(in_->head.load(std::memory_order_acquire) - tail);
    const size_t pos = static_cast<size_t>(tail % capacity);
    return {in_->data.data() + pos, std::min({avail, capacity - pos, roundUp8(maxBytes)})};
  }
  void consume(size_t bytes) override {
    in_->tail.store(in_->tail.load(std::memory_order_relaxed) + roundUp8(bytes),
                    std::memory_order_release);
  }

 private:
  int peer_;
  std::shared_ptr<MemoryRing> out_, in_;
};

// Channels between n ranks: channels[r][p] is rank r's end towards p (null for p == r).
inline std::vector<std::vector<std::unique_ptr<Channel>>> memoryChannels(int n, size_t capacity) {
  std::vector<std::vector<std::shared_ptr<MemoryRing>>> rings(n);
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p) rings[r].push_back(std::make_shared<MemoryRing>(capacity));
  std::vector<std::vector<std::unique_ptr<Channel>>> channels(n);
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p)
      channels[r].push_back(p == r ? nullptr
                                   : std::make_unique<MemoryChannel>(p, rings[r][p], rings[p][r]));
  return channels;
}

}  // namespace loom::test
