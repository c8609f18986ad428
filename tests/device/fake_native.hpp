// A backend's native collectives for tests of the tables that use them: every collective has
// "fast" (up to 4 KiB) and "bulk" (above); running them does nothing.
#pragma once

#include <string>
#include <vector>

#include "device/native.hpp"

namespace loom::test {

class FakeNative : public NativeCollectives {
 public:
  FakeNative() {
    for (int f = 0; f < loomNumFuncs; ++f) {
      if (f == loomFuncSendRecv) continue;
      algorithms_.push_back({static_cast<loomFunc_t>(f), "fast"});
      algorithms_.push_back({static_cast<loomFunc_t>(f), "bulk"});
    }
  }
  const std::vector<NativeAlgorithm>& algorithms() const override { return algorithms_; }
  std::vector<NativeSelectorRow> selectorRows() const override {
    std::vector<NativeSelectorRow> rows;
    for (size_t i = 0; i < algorithms_.size(); i += 2) {
      rows.push_back({algorithms_[i].func, 4096, static_cast<int>(i)});
      rows.push_back({algorithms_[i].func, 1000, static_cast<int>(i + 1)});  // the last: any size
    }
    return rows;
  }
  void run(int, const CollArgs&) override {}
  void pointToPoint(const std::vector<DeviceP2POp>&, loomStream_t) override {}
  void stop() override {}
  std::string describe() const override { return "fake"; }

 private:
  std::vector<NativeAlgorithm> algorithms_;
};

}  // namespace loom::test
