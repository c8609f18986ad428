// torch's PrivateUse1 device over the emulated accelerator: the device guard (devices, streams,
// events), the allocator and the hooks torch asks a PrivateUse1 backend for. Registered when the
// extension loads; they reach the plug-in only once loom.emu has loaded it (Runtime::load).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <chrono>
#include <thread>

#include "emu_runtime.hpp"

namespace loom::emu {

namespace {

// A torch event: the plug-in's event and its device (torch passes only the void* around).
struct Event {
  loomDevEvent_t event = nullptr;
  c10::DeviceIndex device = 0;
};

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  GuardImpl() = default;
  explicit GuardImpl(c10::DeviceType type) {
    TORCH_CHECK(type == c10::DeviceType::PrivateUse1, "loomemu guard for ", type);
  }
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device previous = getDevice();
    if (d.index() != previous.index()) setDevice(d);
    return previous;
  }
  c10::Device getDevice() const override { return c10::Device(type(), currentDevice()); }
  void setDevice(c10::Device d) const override { setCurrentDevice(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      setCurrentDevice(d.index());
    } catch (...) {  // noexcept by torch's contract: a bad index leaves the device as it was
    }
  }
  c10::Stream getStream(c10::Device d) const override { return currentStream(d.index()); }
  c10::Stream getDefaultStream(c10::Device d) const override { return defaultStream(d.index()); }
  c10::Stream getNewStream(c10::Device d, int) const override {
    return Runtime::get().newStream(d.index());
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return Runtime::get().newStream(d.index());
  }
  c10::Stream exchangeStream(c10::Stream s) const override { return loom::emu::exchangeStream(s); }
  c10::DeviceIndex deviceCount() const noexcept override {
    try {
      return static_cast<c10::DeviceIndex>(Runtime::get().deviceCount());
    } catch (...) {
      return 0;  // not loaded yet
    }
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device,
              const c10::EventFlag) const override {
    Runtime& rt = Runtime::get();
    auto* e = static_cast<Event*>(*event);
    if (e == nullptr) {
      e = new Event{nullptr, stream.device_index()};
      rt.check(rt.table().eventCreate(e->device, &e->event), "eventCreate");
      *event = e;
    }
    TORCH_CHECK(device < 0 || device == stream.device_index(), "loom.emu: event of device ",
                int(device), " recorded on a stream of device ", int(stream.device_index()));
    rt.check(rt.table().eventRecord(e->device, e->event, rt.stream(stream)), "eventRecord");
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;  // never recorded: nothing to wait for
    Runtime& rt = Runtime::get();
    auto* e = static_cast<Event*>(event);
    rt.check(rt.table().streamWaitEvent(stream.device_index(), rt.stream(stream), e->event),
             "streamWaitEvent");
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    Runtime& rt = Runtime::get();
    auto* e = static_cast<Event*>(event);
    int done = 0;
    rt.check(rt.table().eventQuery(e->device, e->event, &done), "eventQuery");
    return done != 0;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    auto* e = static_cast<Event*>(event);
    if (e == nullptr) return;
    try {
      Runtime::get().table().eventDestroy(e->device, e->event);
    } catch (...) {  // noexcept: a runtime never loaded has no events either
    }
    delete e;
  }
  void synchronizeEvent(void* event) const override {
    auto pause = std::chrono::microseconds(10);
    while (!queryEvent(event)) {  // the plug-in has no blocking event wait
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
  bool queryStream(const c10::Stream& stream) const override {
    void* event = nullptr;
    record(&event, stream, stream.device_index(), c10::EventFlag::PYTORCH_DEFAULT);
    const bool done = queryEvent(event);
    destroyEvent(event, stream.device_index());
    return done;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    Runtime& rt = Runtime::get();
    rt.check(rt.table().streamSynchronize(stream.device_index(), rt.stream(stream)),
             "streamSynchronize");
  }
  void synchronizeDevice(const c10::DeviceIndex device) const override {
    Runtime& rt = Runtime::get();
    rt.check(rt.table().streamSynchronize(device, nullptr), "streamSynchronize");
    c10::Stream s = currentStream(device);
    if (s.id() != 0) synchronizeStream(s);
  }
  void recordDataPtrOnStream(const c10::DataPtr& dataPtr,
                             const c10::Stream& stream) const override {
    allocator().recordStream(dataPtr, stream);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

// What torch asks of a PrivateUse1 backend beyond the guard (autograd, futures, generators).
struct Hooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return deviceCount() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return GuardImpl().deviceCount(); }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    loom::emu::setCurrentDevice(device);
  }
  c10::DeviceIndex getCurrentDevice() const override { return currentDevice(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    c10::DeviceIndex previous = currentDevice();
    loom::emu::setCurrentDevice(device);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }
  // Random numbers come from the CPU's generator (the operators compute on the CPU).
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Device getDeviceFromPtr(void*) const override {
    return c10::Device(c10::DeviceType::PrivateUse1, currentDevice());
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t bytes) const override {
    c10::DataPtr grown = allocator().allocate(bytes);
    const size_t keep = std::min(bytes, storage.nbytes());
    if (keep > 0) allocator().copy_data(grown.get(), storage.data(), keep);
    storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(grown));
    storage.unsafeGetStorageImpl()->set_nbytes(bytes);
  }
};

// Registered when the library loads, as torch's own backends are.
const bool kRegistered = [] {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator());
  at::RegisterPrivateUse1HooksInterface(new Hooks());
  return true;
}();

}  // namespace

}  // namespace loom::emu
