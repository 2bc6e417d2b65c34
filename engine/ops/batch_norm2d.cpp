// batch_norm2d: per-channel normalisation with the batch's statistics (training) or the
// running ones (eval), and its backward. The forward runs in three backend steps
// (statistics, finalize, apply), the backward in two (per-channel sums, dx): a synchronised
// batch norm combines the replicas' statistics after the first forward step and their sums
// after the first backward step. A 16-bit input (what a 16-bit convolution hands on under
// autocast) is normalised in float32, its statistics, weight, bias and running statistics
// float32, and the output rounded once to the input's dtype, as PyTorch's batch norm takes
// a bfloat16 input beside float32 parameters; the backward keeps the 16-bit input. The
// backends' kernels take the 16-bit tensors themselves and widen each value as they read
// it (kernels/cpu/batch_norm2d.cpp), so no float32 copy of an activation is made.
#include "engine/ops/norm_statistics.h"
#include "engine/ops/op_support.h"

namespace dpcore::ops {

using kernels::BatchNorm2dShape;

struct BatchNorm2dBackward : Node {
  BatchNorm2dShape s;   // s.group_count: values per channel over the group (synchronised)
  Tensor x, weight;     // weight undefined: not affine
  Tensor mean, invstd;  // the batch's (training) or the running statistics' (eval)
  bool training = true;
  BatchNormGroup* group = nullptr;  // synchronised: the sums are the group's
  const char* name() const override { return "BatchNorm2dBackward"; }

  std::vector<Tensor> apply(const Tensor& dy) override {
    std::vector<Tensor> grads(3);
    Backend& b = backend(dy);
    const bool want_dx = needs_grad(*this, 0);
    const bool want_params = weight.defined() && (needs_grad(*this, 1) || needs_grad(*this, 2));
    // In training, dx depends on the statistics through sum(dy) and sum(dy * xhat), which are
    // also the gradients of bias and weight.
    // Synchronised, dx needs the group's sums: both in one buffer, summed in one collective.
    // (Every replica joins it, whatever gradients it wants, or the others would wait.)
    Tensor sums, sum_dy, sum_dy_xhat;
    if ((want_dx || group) && training) {
      sums = empty_computed({2 * s.C}, dy);
      sum_dy = sums.narrow0(0, s.C), sum_dy_xhat = sums.narrow0(s.C, 2 * s.C);
    }
    if (want_params || sum_dy.defined()) {
      WeightGrads g = want_params ? weight_grads(*this, weight, s.C) : WeightGrads{};
      b.batch_norm2d_backward_reduce(s, dy, x, mean, invstd, optional(sum_dy), optional(sum_dy_xhat), optional(g.dw),
                                     optional(g.db), g.accumulate);
      if (want_params) return_weight_grads(*this, g, grads);
    }
    // (weight and bias gradients stay this replica's own: the gradient allreduce sums them.)
    if (group && sums.defined()) group->all_sum(sums);
    if (want_dx) {
      grads[0] = empty_like(x);
      b.batch_norm2d_backward_apply(s, dy, x, mean, invstd, optional(weight), optional(sum_dy), optional(sum_dy_xhat),
                                    grads[0]);
    }
    return grads;
  }

  static Tensor* optional(Tensor& t) { return t.defined() ? &t : nullptr; }
};

namespace {

BatchNorm2dShape batch_norm2d_shape(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var, bool training, double eps,
                                    const BatchNormGroup* group) {
  check_float_or_half_tensor("batch_norm2d", "input", x, 4);
  BatchNorm2dShape s;
  s.N = x.size(0), s.C = x.size(1), s.H = x.size(2), s.W = x.size(3);
  auto check_per_channel = [&](const char* what, const Tensor& t) {
    if (!t.defined()) return;
    check_statistics_tensor("batch_norm2d", what, x, t);
    DPCORE_CHECK(t.dim() == 1 && t.size(0) == s.C, "batch_norm2d: ", what, " ", shape_str(t.shape()),
                 " does not match the ", s.C, " channels of input ", shape_str(x.shape()));
  };
  check_per_channel("weight", weight);
  check_per_channel("bias", bias);
  check_per_channel("running_mean", running_mean);
  check_per_channel("running_var", running_var);
  DPCORE_CHECK(weight.defined() == bias.defined(),
               "batch_norm2d: weight and bias must both be defined (affine) or both undefined");
  DPCORE_CHECK(running_mean.defined() == running_var.defined(),
               "batch_norm2d: running_mean and running_var must both be defined or both undefined");
  DPCORE_CHECK(training || running_mean.defined(),
               "batch_norm2d: eval mode normalises with running_mean and running_var, which are undefined");
  DPCORE_CHECK(eps >= 0.0, "batch_norm2d: eps ", eps, " must be non-negative");
  DPCORE_CHECK(s.count() > 0, "batch_norm2d: input ", shape_str(x.shape()), " has no values per channel");
  // PyTorch's rule: the variance of a single value is 0 and its unbiased estimate undefined.
  // (A synchronised batch norm checks the group's count instead: group_statistics.)
  DPCORE_CHECK(!training || group || s.count() > 1,
               "batch_norm2d: expected more than 1 value per channel when training, got input ", shape_str(x.shape()));
  return s;
}

// The group's mean and biased variance per channel, from this replica's x: local
// statistics, packed as (count, mean, var) x C, allgathered, combined in rank order
// (Chan et al.'s parallel variance: no E[x^2] - E[x]^2 cancellation). Sets s.group_count.
void group_statistics(BatchNorm2dShape& s, const Tensor& x, BatchNormGroup& group, Tensor& mean, Tensor& var) {
  const int64_t group_count = group.rows() * s.H * s.W;
  DPCORE_CHECK(group.rows() >= s.N, "batch_norm2d: the group's micro-batch of ", group.rows(),
               " samples is smaller than this replica's input ", shape_str({s.N, s.C, s.H, s.W}));
  DPCORE_CHECK(group_count > 1, "batch_norm2d: expected more than 1 value per channel over the group when training, got ",
               group_count);
  Backend& b = backend(x);
  const DType statistics = compute_dtype(x.dtype());
  Tensor local = Tensor::empty({3 * s.C}, statistics, x.device());
  Tensor local_count = local.narrow0(0, s.C), local_mean = local.narrow0(s.C, 2 * s.C),
         local_var = local.narrow0(2 * s.C, 3 * s.C);
  b.fill(local_count, double(s.count()));
  b.batch_norm2d_stats(s, x, local_mean, local_var);
  Tensor gathered = Tensor::empty({group.size() * 3 * s.C}, statistics, x.device());
  group.all_gather(local, gathered);
  b.batch_norm2d_combine_stats(s, group.size(), gathered, mean, var);
  s.group_count = group_count;
}

}  // namespace

Tensor batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                    Tensor& running_var, bool training, double momentum, double eps, BatchNormGroup* group) {
  BatchNorm2dShape s = batch_norm2d_shape(x, weight, bias, running_mean, running_var, training, eps, group);
  Backend& b = backend(x);
  Tensor mean = empty_computed({s.C}, x), invstd = empty_computed({s.C}, x);
  if (training) {
    Tensor var = empty_computed({s.C}, x);
    if (group) group_statistics(s, x, *group, mean, var);
    else b.batch_norm2d_stats(s, x, mean, var);
    b.batch_norm2d_finalize(s, mean, var, eps, momentum, invstd, running_mean.defined() ? &running_mean : nullptr,
                            running_var.defined() ? &running_var : nullptr);
  } else {
    // A copy: a training forward before this backward would update running_mean in place.
    mean.copy_(running_mean);
    b.batch_norm2d_finalize(s, mean, running_var, eps, 0.0, invstd, nullptr, nullptr);
  }
  Tensor y = empty_like(x);
  b.batch_norm2d_apply(s, x, mean, invstd, weight.defined() ? &weight : nullptr, bias.defined() ? &bias : nullptr, y);
  auto node = std::make_shared<BatchNorm2dBackward>();
  node->s = s, node->x = x.detach(), node->mean = mean, node->invstd = invstd, node->training = training;
  node->group = training ? group : nullptr;
  if (weight.defined()) node->weight = weight.detach();
  return record(node, y, {x, weight, bias});
}

}  // namespace dpcore::ops
