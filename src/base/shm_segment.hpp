// A POSIX shared-memory segment mapped into this process. The creator unlinks the name as soon as
// every rank has mapped it, so a crashed job leaves nothing behind in /dev/shm.
#pragma once

#include <cstddef>
#include <string>

namespace loom {

class ShmSegment {
 public:
  static ShmSegment create(const std::string& name, size_t bytes);
  static ShmSegment open(const std::string& name, size_t bytes);
  // A name no other job's segment has: `prefix` (e.g. "/loom-"), this process's id and a
  // random nonce.
  static std::string uniqueName(const std::string& prefix);
  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  void unlink();  // idempotent
  char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  char* data_ = nullptr;
  size_t size_ = 0;
  bool linked_ = false;
};

}  // namespace loom
