#include "engine/tensor.h"

#include <cstring>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/runtime.h"

namespace dpcore {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

static void check_shape(const Shape& shape) {
  for (int64_t d : shape) DPCORE_CHECK(d >= 0, "tensor shape ", shape_str(shape), " has a negative size");
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  Allocator& alloc = runtime::allocator_for(device);
  auto storage = std::make_shared<Storage>(size_t(shape_numel(shape)) * dtype_size(dtype), device, &alloc);
  return view_of(std::move(storage), 0, shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_host(const void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.nbytes()) backend_for(device).copy_bytes(t.raw_data(), device, data, Device::cpu(), t.nbytes());
  return t;
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  DPCORE_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(), " values for shape ",
               shape_str(shape));
  return from_host(values.data(), shape, dtype_of<T>::value, device);
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<double>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<int32_t>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<int64_t>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<kernels::BFloat16>&, const Shape&, Device);
template Tensor Tensor::from_vector(const std::vector<kernels::Float16>&, const Shape&, Device);

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, size_t offset, const Shape& shape, DType dtype) {
  check_shape(shape);
  DPCORE_CHECK(offset + size_t(shape_numel(shape)) * dtype_size(dtype) <= storage->bytes(), "view of ",
               shape_str(shape), " at byte ", offset, " runs past its storage of ", storage->bytes(), " bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->device = storage->device();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  DPCORE_CHECK(d >= -n && d < n, "size(", d, ") of a tensor with shape ", shape_str(shape()));
  return shape()[size_t(d < 0 ? d + n : d)];
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " on " + device().str();
}

Tensor Tensor::view(const Shape& shape) const {
  DPCORE_CHECK(shape_numel(shape) == numel(), "view: cannot view ", str(), " as ", shape_str(shape));
  return view_of(storage(), storage_offset(), shape, dtype());
}

Tensor Tensor::narrow0(int64_t begin, int64_t end) const {
  DPCORE_CHECK(dim() >= 1 && 0 <= begin && begin <= end && end <= size(0), "narrow0: rows [", begin, ", ", end,
               ") of ", str());
  Shape s = shape();
  s[0] = end - begin;
  int64_t row = size(0) > 0 ? numel() / size(0) : 0;  // elements per row
  return view_of(storage(), storage_offset() + size_t(begin * row) * dtype_size(dtype()), s, dtype());
}

Tensor Tensor::detach() const { return view_of(storage(), storage_offset(), shape(), dtype()); }

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device());
  t.copy_(*this);
  return t;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor t = empty(shape(), dtype(), target);
  t.copy_(*this);
  return t;
}

void Tensor::copy_(const Tensor& src) const {
  DPCORE_CHECK(src.shape() == shape() && src.dtype() == dtype(), "copy_: source ", src.str(), " does not match ",
               str());
  if (nbytes() == 0 || raw_data() == src.raw_data()) return;
  // The GPU side does the copy; host-to-host is the CPU backend's memcpy.
  Device via = device().is_cuda() ? device() : src.device();
  backend_for(via).copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
}

void Tensor::fill_(double value) const {
  Tensor self = *this;
  backend_for(device()).fill(self, value);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  DPCORE_CHECK(dtype_of<T>::value == dtype(), "to_vector<", dtype_name(dtype_of<T>::value), "> on ", str());
  std::vector<T> out(static_cast<size_t>(numel()));
  Device via = device();
  if (nbytes()) backend_for(via).copy_bytes(out.data(), Device::cpu(), raw_data(), device(), nbytes());
  return out;
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<double> Tensor::to_vector() const;
template std::vector<int32_t> Tensor::to_vector() const;
template std::vector<int64_t> Tensor::to_vector() const;
template std::vector<kernels::BFloat16> Tensor::to_vector() const;
template std::vector<kernels::Float16> Tensor::to_vector() const;

double Tensor::item() const {
  DPCORE_CHECK(numel() == 1, "item() on ", str(), ": needs exactly one element");
  switch (dtype()) {
    case DType::Float32: return to_vector<float>()[0];
    case DType::Float64: return to_vector<double>()[0];
    case DType::Int32: return to_vector<int32_t>()[0];
    case DType::Int64: return double(to_vector<int64_t>()[0]);
    case DType::BFloat16: return kernels::bfloat16_to_float(to_vector<kernels::BFloat16>()[0]);
    case DType::Float16: return kernels::float16_to_float(to_vector<kernels::Float16>()[0]);
  }
  return 0.0;
}

Tensor& Tensor::set_requires_grad(bool on) {
  DPCORE_CHECK(!on || is_floating(dtype()) || is_half_precision(dtype()), "requires_grad on a ", dtype_name(dtype()),
               " tensor");
  DPCORE_CHECK(is_leaf(), "requires_grad can only be set on leaf tensors, not on the output of ",
               "an op (", str(), ")");
  impl().requires_grad = on;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  DPCORE_CHECK(!g.defined() || (g.shape() == shape() && g.dtype() == dtype() && g.device() == device()),
               "set_grad: gradient ", g.str(), " does not match ", str());
  impl().grad = g.impl_ptr();
}

void Tensor::add_post_accumulate_hook(GradHook hook) {
  DPCORE_CHECK(is_leaf() && requires_grad(), "post-accumulate hooks need a leaf that requires grad (", str(), ")");
  impl().post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::backward(const Tensor& seed) const { autograd::run_backward(*this, seed); }

void check_float_tensor(const char* op, const char* what, const Tensor& t, int64_t rank) {
  DPCORE_CHECK(t.defined(), op, ": ", what, " is undefined");
  DPCORE_CHECK(is_floating(t.dtype()), op, ": ", what, " must be float32 or float64, got ", t.str());
  DPCORE_CHECK(rank < 0 || t.dim() == rank, op, ": ", what, " must have ", rank, " dimensions, got ", t.str());
}

void check_float_or_half_tensor(const char* op, const char* what, const Tensor& t, int64_t rank) {
  DPCORE_CHECK(t.defined(), op, ": ", what, " is undefined");
  DPCORE_CHECK(is_floating(t.dtype()) || is_half_precision(t.dtype()), op, ": ", what,
               " must be float32, float64, bfloat16 or float16, got ", t.str());
  DPCORE_CHECK(rank < 0 || t.dim() == rank, op, ": ", what, " must have ", rank, " dimensions, got ", t.str());
}

void check_same_device_dtype(const char* op, const Tensor& a, const Tensor& b) {
  DPCORE_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.str(), " and ", b.str());
  DPCORE_CHECK(a.dtype() == b.dtype(), op, ": mixed dtypes: ", a.str(), " and ", b.str());
}

}  // namespace dpcore
