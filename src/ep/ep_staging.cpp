#include "ep/ep_staging.hpp"

#include "device/ep_format.hpp"

namespace loom::ep {

Staging::~Staging() {
  if (host_ != nullptr) device_.releaseHost(host_);
}

void Staging::measure() {
  measuring_ = true;
  used_ = 0;
  back_.clear();
}

void Staging::stage(loomStream_t stream) {
  if (used_ > capacity_) {
    if (host_ != nullptr) device_.releaseHost(host_);
    host_ = nullptr;
    capacity_ = 0;
    host_ = static_cast<char*>(device_.allocateHost(used_));
    capacity_ = used_;
  }
  measuring_ = false;
  used_ = 0;
  stream_ = stream;
  back_.clear();
}

void* Staging::place(void* device, size_t bytes, bool in, bool out) {
  if (device == nullptr) return nullptr;
  const size_t at = used_;
  used_ += align64(bytes);
  if (measuring_) return nullptr;
  char* host = host_ + at;
  if (in && bytes > 0) device_.copyAsync(host, device, bytes, CopyKind::kDeviceToHost, stream_);
  if (out && bytes > 0) back_.push_back({device, host, bytes});
  return host;
}

void Staging::arrived() { device_.synchronize(stream_); }

void Staging::finish() {
  for (const Back& b : back_)
    device_.copyAsync(b.device, b.host, b.bytes, CopyKind::kHostToDevice, stream_);
  back_.clear();
  device_.synchronize(stream_);
}

}  // namespace loom::ep
