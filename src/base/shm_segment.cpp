#include "base/shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>
#include <utility>

#include "base/error.hpp"
#include "base/sha256.hpp"

namespace loom {

namespace {

char* mapFd(int fd, size_t bytes, const std::string& name) {
  void* ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (ptr == MAP_FAILED) {
    int err = errno;
    close(fd);
    LOOM_THROW(loomSystemError, "mmap of shared segment ", name, " (", bytes,
               " bytes) failed: ", detail::errnoText(err));
  }
  close(fd);
  return static_cast<char*>(ptr);
}

}  // namespace

std::string ShmSegment::uniqueName(const std::string& prefix) {
  uint64_t nonce = 0;
  randomBytes(&nonce, sizeof(nonce));
  std::ostringstream n;
  n << prefix << getpid() << "-" << std::hex << nonce;
  return n.str();
}

ShmSegment ShmSegment::create(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  LOOM_SYSCHECK(fd, "shm_open(" + name + ") to create");
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    LOOM_THROW(loomSystemError, "sizing shared segment ", name, " to ", bytes,
               " bytes failed (is /dev/shm large enough?): ", detail::errnoText(err));
  }
  ShmSegment seg;
  seg.name_ = name;
  seg.linked_ = true;
  try {
    seg.data_ = mapFd(fd, bytes, name);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
  seg.size_ = bytes;
  return seg;
}

ShmSegment ShmSegment::open(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  LOOM_SYSCHECK(fd, "shm_open(" + name + ") to attach");
  ShmSegment seg;
  seg.name_ = name;
  seg.data_ = mapFd(fd, bytes, name);
  seg.size_ = bytes;
  return seg;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept { *this = std::move(other); }

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    this->~ShmSegment();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    linked_ = std::exchange(other.linked_, false);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
}

void ShmSegment::unlink() {
  if (linked_) shm_unlink(name_.c_str());
  linked_ = false;
}

}  // namespace loom
