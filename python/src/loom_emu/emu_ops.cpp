// The loomemu device's operators: what communication buffers need (empty, copies in every
// direction, resize, set_, the view kernels) on the device itself; every other operator runs on
// the CPU through torch's CPU fallback (its tensors copied to the host and the results back), so
// a model's forward and backward work on the device, slowly, with the CPU's exact arithmetic.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "emu_runtime.hpp"

namespace loom::emu {

namespace {

c10::DeviceIndex indexOf(std::optional<c10::Device> device) {
  return device && device->has_index() ? device->index() : currentDevice();
}

at::Tensor empty(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                 std::optional<at::Layout>, std::optional<at::Device> device, std::optional<bool>,
                 std::optional<at::MemoryFormat> format) {
  c10::DeviceGuard guard(c10::Device(c10::kPrivateUse1, indexOf(device)));
  return at::detail::empty_generic(size, &allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   dtype.value_or(at::get_default_dtype_as_scalartype()), format);
}

at::Tensor emptyStrided(at::IntArrayRef size, at::IntArrayRef stride,
                        std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                        std::optional<at::Device> device, std::optional<bool>) {
  c10::DeviceGuard guard(c10::Device(c10::kPrivateUse1, indexOf(device)));
  return at::detail::empty_strided_generic(size, stride, &allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           dtype.value_or(at::get_default_dtype_as_scalartype()));
}

// The bytes of a device tensor's storage that its elements span, as a host tensor with the
// tensor's shape and strides over them (`view`); read from the device when asked.
struct HostMirror {
  at::Tensor buffer;
  at::Tensor view;
  size_t bytes = 0;
};

char* firstByte(const at::Tensor& t) {
  return static_cast<char*>(t.storage().mutable_data()) + t.storage_offset() * t.element_size();
}

HostMirror mirror(const at::Tensor& t, bool read) {
  HostMirror m;
  const size_t item = t.element_size();
  m.bytes = t.numel() == 0 ? 0 : at::detail::computeStorageNbytes(t.sizes(), t.strides(), item);
  m.buffer = at::empty({static_cast<int64_t>(m.bytes / item)}, t.options().device(at::kCPU));
  if (read)
    Runtime::get().copyToHost(m.buffer.data_ptr(), firstByte(t), m.bytes, t.device().index());
  m.view = m.buffer.as_strided(t.sizes(), t.strides(), 0);
  return m;
}

// Whether src's bytes are dst's bytes as they are: one plain copy moves them.
bool sameLayout(const at::Tensor& src, const at::Tensor& dst) {
  return src.scalar_type() == dst.scalar_type() && src.sizes() == dst.sizes() &&
         src.is_contiguous() && dst.is_contiguous() && !src.is_conj() && !src.is_neg() &&
         !dst.is_conj() && !dst.is_neg();
}

at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool) {
  at::Tensor src = self.sizes() == dst.sizes() ? self : self.expand_as(dst);
  if (dst.numel() == 0) return dst;
  Runtime& rt = Runtime::get();
  const bool srcOnDevice = src.is_privateuseone(), dstOnDevice = dst.is_privateuseone();
  if (sameLayout(src, dst)) {
    const size_t bytes = dst.nbytes();
    if (srcOnDevice && dstOnDevice && src.device() == dst.device()) {
      rt.copyOnDevice(dst.data_ptr(), src.data_ptr(), bytes, dst.device().index());
      return dst;
    }
    if (!srcOnDevice) {
      rt.copyToDevice(dst.data_ptr(), src.data_ptr(), bytes, dst.device().index());
      return dst;
    }
    if (!dstOnDevice) {
      rt.copyToHost(dst.data_ptr(), src.data_ptr(), bytes, src.device().index());
      return dst;
    }
  }
  // Any other copy (dtypes, strides, another device) goes through host memory.
  at::Tensor hostSrc = srcOnDevice ? mirror(src, true).view : src;
  if (!dstOnDevice) {
    dst.copy_(hostSrc);
    return dst;
  }
  HostMirror out = mirror(dst, !dst.is_contiguous());
  out.view.copy_(hostSrc);
  rt.copyToDevice(firstByte(dst), out.buffer.data_ptr(), out.bytes, dst.device().index());
  return dst;
}

// Grows the storage of t to hold `bytes` (as torch's resize does: the old bytes kept).
void ensureStorage(const at::Tensor& t, size_t bytes) {
  c10::Storage storage = t.storage();
  if (bytes <= storage.nbytes()) return;
  TORCH_CHECK(storage.resizable(), "loom.emu: resize of a tensor whose storage is not resizable");
  c10::DeviceGuard guard(t.device());
  c10::DataPtr grown = allocator().allocate(bytes);
  if (storage.nbytes() > 0)
    Runtime::get().copyOnDevice(grown.get(), storage.data(), storage.nbytes(), t.device().index());
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(grown));
  storage.unsafeGetStorageImpl()->set_nbytes(bytes);
}

const at::Tensor& resizeOnDevice(const at::Tensor& self, at::IntArrayRef size,
                                 std::optional<at::MemoryFormat> format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  if (format && *format != at::MemoryFormat::Preserve) impl->empty_tensor_restride(*format);
  if (self.numel() > 0)
    ensureStorage(
        self, at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.element_size(),
                                               self.storage_offset()));
  return self;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) resizeOnDevice(dst, self.sizes(), std::nullopt);
  return copyFrom(self, dst, false);
}

at::Tensor& setStorage(at::Tensor& self, c10::Storage source, int64_t offset, at::IntArrayRef size,
                       at::IntArrayRef stride) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  if (stride.empty())
    impl->set_sizes_contiguous(size);
  else
    impl->set_sizes_and_strides(size, stride);
  if (self.numel() > 0)
    ensureStorage(self, at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                         self.element_size(), offset));
  return self;
}

at::Tensor& setWholeStorage(at::Tensor& self, c10::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.element_size());
  return setStorage(self, std::move(source), 0, {elements}, {});
}

at::Tensor& setTensor(at::Tensor& self, const at::Tensor& source) {
  return setStorage(self, source.storage(), source.storage_offset(), source.sizes(),
                    source.strides());
}

at::Tensor& setEmpty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &allocator(), true);
  return setStorage(self, std::move(storage), 0, {0}, {});
}

// Views would come back from the CPU as copies: the fallback refuses them instead.
void cpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty);
  m.impl("empty_strided", emptyStrided);
  m.impl("_copy_from", copyFrom);
  m.impl("_copy_from_and_resize", copyFromAndResize);
  m.impl("resize_", resizeOnDevice);
  m.impl("set_.source_Storage_storage_offset", setStorage);
  m.impl("set_.source_Storage", setWholeStorage);
  m.impl("set_.source_Tensor", setTensor);
  m.impl("set_", setEmpty);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpuFallback>());
}

}  // namespace loom::emu
