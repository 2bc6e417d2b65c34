// Inverted dropout with a counter-based mask (kernels/dropout_config.h).
//
// The backward recomputes the mask from the counter instead of storing it: it is one
// Philox call per four elements, integer work that hides under the memory traffic the
// kernel has anyway, while a stored mask would hold a byte (or a bit) per element from the
// forward to the backward and cost a write and a read of its own. Since the mask is a pure
// function of the options, the backward gets the very same bits. A 16-bit input gives a
// 16-bit output, x * mask / (1 - p) computed in float32 and rounded once, by the backends'
// kernels on the 16-bit tensors themselves; the mask does not depend on the dtype.
#include "engine/ops/op_support.h"

namespace dpcore::ops {

namespace {

struct DropoutBackward : Node {
  kernels::DropoutConfig cfg;
  const char* name() const override { return "DropoutBackward"; }
  std::vector<Tensor> apply(const Tensor& dy) override {
    Tensor dx = empty_like(dy);
    backend(dy).dropout(cfg, dy, dx);
    return {dx};
  }
};

}  // namespace

Tensor dropout(const Tensor& x, const DropoutOptions& opt) {
  DPCORE_CHECK(opt.p >= 0.0 && opt.p <= 1.0, "dropout: p = ", opt.p,
               " is outside [0, 1] (the probability of zeroing an element)");
  check_float_or_half_tensor("dropout", "input", x);
  DPCORE_CHECK(x.dim() >= 1, "dropout: input ", shape_str(x.shape()), " has no sample dimension (dim 0)");
  const int64_t samples = x.size(0), sample_size = samples ? x.numel() / samples : 0;
  DPCORE_CHECK(opt.first_sample >= 0 && opt.first_sample <= kernels::kDropoutMaxSamples - samples,
               "dropout: first_sample ", opt.first_sample, " with the ", samples, " samples of input ",
               shape_str(x.shape()), " leaves [0, 2^32), the global sample indices the mask's counter holds");
  DPCORE_CHECK(sample_size <= kernels::kDropoutMaxSampleSize, "dropout: input ", shape_str(x.shape()), " has ",
               sample_size, " elements per sample, more than the mask's counter holds (2^34)");
  if (!opt.training || opt.p == 0.0) return x;  // the identity, as in PyTorch (x itself)
  const kernels::DropoutConfig cfg{opt.p, opt.seed, opt.step, opt.first_sample};
  Tensor y = empty_like(x);
  backend(x).dropout(cfg, x, y);
  auto node = std::make_shared<DropoutBackward>();
  node->cfg = cfg;
  return record(node, y, {x});
}

}  // namespace dpcore::ops
