// Tensor: a contiguous N-d array on one device, plus the autograd metadata that makes it
// part of a graph. A Tensor is a cheap handle (shared_ptr to TensorImpl): copies alias the
// same data and the same gradient, as in PyTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "kernels/error.h"
#include "engine/storage.h"

namespace dpcore {

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);

namespace autograd {
class Node;
}

class Tensor;
using GradHook = std::function<void(const Tensor& grad)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset = 0;  // in bytes from the start of the storage
  Shape shape;
  DType dtype = DType::Float32;
  Device device;

  // Autograd metadata.
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;          // null for leaves
  std::shared_ptr<TensorImpl> grad;                 // leaves: accumulated gradient
  std::vector<GradHook> post_accumulate_hooks;      // leaves: run after each accumulation
  std::weak_ptr<autograd::Node> grad_accumulator;   // leaves: the node that accumulates into grad
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation ----
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32, Device device = Device::cpu());
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
  // A copy of host memory holding shape_numel(shape) elements of `dtype`.
  static Tensor from_host(const void* data, const Shape& shape, DType dtype, Device device = Device::cpu());
  // A tensor viewing `shape` elements of `storage` starting at byte `offset` (no copy).
  static Tensor view_of(std::shared_ptr<Storage> storage, size_t offset, const Shape& shape, DType dtype);

  // ---- properties ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int64_t dim() const { return int64_t(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().device; }
  std::string str() const;  // "float32[64, 3, 32, 32] on cpu"

  void* raw_data() const { return static_cast<char*>(impl().storage->data()) + impl().offset; }
  template <class T>
  T* data() const {
    DPCORE_CHECK(dtype_of<T>::value == dtype(), "tensor data<", dtype_name(dtype_of<T>::value), ">() on a ",
                 dtype_name(dtype()), " tensor");
    return static_cast<T*>(raw_data());
  }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  size_t storage_offset() const { return impl().offset; }
  bool same_data(const Tensor& o) const { return raw_data() == o.raw_data(); }

  // ---- views and copies (no autograd; the ops in engine/ops.h record graphs) ----
  Tensor view(const Shape& shape) const;              // same data, new shape, same numel
  Tensor narrow0(int64_t begin, int64_t end) const;   // rows [begin, end) along dim 0, same data
  Tensor detach() const;                              // same data, no graph
  Tensor clone() const;                               // new storage, same device
  Tensor to(Device device) const;                     // copy to another device (self if already there)
  void copy_(const Tensor& src) const;                    // this <- src, any devices, same shape and dtype
  void fill_(double value) const;
  void zero_() const { fill_(0.0); }
  template <class T>
  std::vector<T> to_vector() const;                   // host copy of the elements
  double item() const;                                // value of a one-element float tensor

  // ---- autograd ----
  bool requires_grad() const { return defined() && impl().requires_grad; }
  Tensor& set_requires_grad(bool on);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  Tensor grad() const { return Tensor(impl().grad); }
  // Makes `g` the leaf's gradient buffer: backward accumulates into it in place (this is
  // how parameters get views into the flat gradient buffer).
  void set_grad(const Tensor& g);
  // Called after every accumulation into this leaf's gradient (DDP uses it to launch a
  // bucket's allreduce as soon as its last gradient is final).
  void add_post_accumulate_hook(GradHook hook);
  // Reverse-mode pass from this tensor. A one-element tensor seeds with 1 unless `seed` is given.
  void backward(const Tensor& seed = Tensor()) const;

  TensorImpl& impl() const {
    DPCORE_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Fails with a message naming `op` unless `t` is defined, has `rank` dims and a floating dtype.
void check_float_tensor(const char* op, const char* what, const Tensor& t, int64_t rank = -1);
// The same for the matrix products that also compute with 16-bit inputs (linear,
// batched_matmul: float32 accumulation, docs/mixed-precision.md): float32, float64,
// bfloat16 or float16.
void check_float_or_half_tensor(const char* op, const char* what, const Tensor& t, int64_t rank = -1);
void check_same_device_dtype(const char* op, const Tensor& a, const Tensor& b);

}  // namespace dpcore
