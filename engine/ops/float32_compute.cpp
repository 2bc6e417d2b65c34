#include "engine/ops/float32_compute.h"

#include <algorithm>

#include "engine/ops/op_support.h"

namespace dpcore::ops {

namespace {
// Elements per block of the conversion path: 1 MiB of float32 per temporary, small enough
// to stay in a core's L2 cache between the widening, the kernel and the rounding.
constexpr int64_t kBlockElements = int64_t(1) << 18;
}  // namespace

DType compute_dtype(DType dtype) { return is_half_precision(dtype) ? DType::Float32 : dtype; }

Tensor in_compute_dtype(const Tensor& t) {
  if (!t.defined() || !is_half_precision(t.dtype())) return t;
  Tensor wide = Tensor::empty(t.shape(), DType::Float32, t.device());
  backend(t).cast(t, wide);
  return wide;
}

Tensor empty_computed(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, compute_dtype(like.dtype()), like.device());
}

Tensor stored_as(const Tensor& computed, DType dtype) {
  if (computed.dtype() == dtype) return computed;
  Tensor stored = Tensor::empty(computed.shape(), dtype, computed.device());
  backend(computed).cast(computed, stored);
  return stored;
}

void in_float32_blocks(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                       const std::function<void(Block&)>& kernel) {
  DPCORE_CHECK(!inputs.empty() && inputs.front().dim() >= 1, "in_float32_blocks: no input with rows");
  const Tensor& rows = inputs.front();
  const int64_t n = rows.size(0);
  bool any_half = false;
  for (const auto* list : {&inputs, &outputs})
    for (const Tensor& t : *list) any_half = any_half || is_half_precision(t.dtype());
  if (!any_half || n == 0) {
    Block whole{0, n, inputs, outputs};
    kernel(whole);
    return;
  }
  const int64_t step = std::max<int64_t>(kBlockElements / std::max<int64_t>(rows.numel() / n, 1), 1);
  for (int64_t begin = 0; begin < n; begin += step) {
    const int64_t end = std::min(n, begin + step);
    Block b{begin, end, {}, {}};
    for (const Tensor& t : inputs) b.in.push_back(in_compute_dtype(t.narrow0(begin, end)));
    for (const Tensor& t : outputs) {
      Tensor part = t.narrow0(begin, end);  // a 16-bit output's rows get a float32 block first
      b.out.push_back(is_half_precision(t.dtype()) ? empty_computed(part.shape(), t) : part);
    }
    kernel(b);
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!is_half_precision(outputs[i].dtype())) continue;
      Tensor part = outputs[i].narrow0(begin, end);
      backend(part).cast(b.out[i], part);
    }
  }
}

Tensor flat(const Tensor& t) { return t.view({t.numel()}); }

void check_statistics_tensor(const char* op, const char* what, const Tensor& x, const Tensor& t) {
  DPCORE_CHECK(t.device() == x.device(), op, ": tensors on different devices: ", what, " ", t.str(), " and input ",
               x.str());
  DPCORE_CHECK(t.dtype() == compute_dtype(x.dtype()), op, ": ", what, " ", t.str(), " must be ",
               dtype_name(compute_dtype(x.dtype())), " for input ", x.str());
}

}  // namespace dpcore::ops
