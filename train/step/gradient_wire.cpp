#include "train/step/gradient_wire.h"

#include <string>

#include "engine/backend.h"
#include "kernels/error.h"

namespace dpcore::train {

DType grad_dtype_of(const std::string& flag_value) {
  if (flag_value == "fp32") return DType::Float32;
  DPCORE_CHECK(flag_value == "bf16", "--grad-dtype ", flag_value, ": unknown (expected fp32 or bf16)");
  return DType::BFloat16;
}

Tensor make_wire_gradients(DType wire, const Tensor& grads) {
  if (wire == DType::Float32) return Tensor();
  DPCORE_CHECK(is_half_precision(wire), "make_wire_gradients: the allreduce moves float32, bfloat16 or float16, not ",
               dtype_name(wire));
  DPCORE_CHECK(grads.dtype() == DType::Float32, "make_wire_gradients: ", dtype_name(wire),
               " communication needs float32 gradients, not ", grads.str());
  return Tensor::empty({grads.numel()}, wire, grads.device());
}

Tensor outgoing_gradients(const Tensor& wire, const Tensor& grads, int64_t begin, int64_t end) {
  Tensor range = grads.narrow0(begin, end);
  if (!wire.defined()) return range;
  Tensor out = wire.narrow0(begin, end);
  backend_for(grads.device()).cast(range, out);
  return out;
}

void receive_gradients(const Tensor& wire, const Tensor& grads) {
  if (!wire.defined()) return;
  Tensor out = grads;
  backend_for(grads.device()).cast(wire, out);
}

}  // namespace dpcore::train
