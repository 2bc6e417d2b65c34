// --grad-dtype bf16 (docs/mixed-precision.md): the gradient allreduce moves bfloat16, half
// the bytes of float32, as PyTorch DDP's bf16_compress_hook does. The float32 gradient
// buffer stays where the micro-batches accumulate and what the optimizer reads; only the
// communication is 16-bit:
//   1. just before a range of the gradients is allreduced (dp: the whole buffer; ddp: one
//      bucket), it is rounded to nearest even into a persistent bfloat16 buffer of the same
//      layout (one flat buffer, one layout: a bucket is the same range in both);
//   2. the allreduce sums the bfloat16 range, each partial sum rounded back to bfloat16 as
//      NCCL's kernels do (comm/communicator.h);
//   3. once every range has come back, ONE cast widens the whole wire buffer into the
//      float32 gradients.
// Every replica widens the same reduced bits, so the replicas stay identical. The gradient
// seed already divides by the global batch's targets, so nothing is divided by the world
// size (where PyTorch's hook divides before it sums).
#pragma once

#include <cstdint>
#include <string>

#include "engine/tensor.h"

namespace dpcore::train {

// "fp32" or "bf16" (the --grad-dtype flag) as a dtype; anything else fails naming the flag.
DType grad_dtype_of(const std::string& flag_value);

// The wire buffer for `grads` (the model's flat float32 gradients): bfloat16 or float16 of
// the same numel on the same device; undefined for float32 (the allreduce then moves the
// gradients themselves).
Tensor make_wire_gradients(DType wire, const Tensor& grads);

// The range [begin, end) to allreduce: the gradients' own view when `wire` is undefined;
// otherwise the range rounded into `wire`, and its view there.
Tensor outgoing_gradients(const Tensor& wire, const Tensor& grads, int64_t begin, int64_t end);

// After every range's allreduce: the reduced 16-bit values widened (exactly) into the
// float32 gradients, in one pass. Nothing to do when `wire` is undefined.
void receive_gradients(const Tensor& wire, const Tensor& grads);

}  // namespace dpcore::train
