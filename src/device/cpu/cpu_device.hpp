// The host CPU backend: the reference every other backend is checked against.
#pragma once

#include <memory>

#include "device/device.hpp"

namespace loom {

std::unique_ptr<Device> createCpuDevice();

}  // namespace loom
