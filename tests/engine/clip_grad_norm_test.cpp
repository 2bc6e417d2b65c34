// Optimizer::set_clip_grad_norm against a float64 computation and against
// torch.nn.utils.clip_grad_norm_'s semantics written out (norm_type 2):
//     total_norm = ||g||_2 (float32);  clip_coef = max_norm / (total_norm + 1e-6);
//     g *= min(clip_coef, 1)           (in float32, in place, before the optimizer's step).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/adam.h"
#include "engine/sgd.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

constexpr double kU = 0x1p-24;  // float32's unit roundoff

// Two tensors, so that the layout's padding between them (zero in the gradient buffer) lies
// inside the summed buffer; the gradients scaled to a norm near `norm_near`.
struct Job {
  FlatParameters params{{{"w", {37, 5}}, {"b", {11}}}, DType::Float32, Device::cpu()};
  std::vector<float> grads;  // the whole buffer, padding included
  explicit Job(double norm_near) {
    const std::vector<float> drawn = testing::random_vector<float>(size_t(params.total()), 3, -1.0, 1.0);
    grads.assign(size_t(params.total()), 0.0f);
    double norm = 0;
    for (const auto& e : params.entries()) {
      for (int64_t i = e.offset; i < e.offset + e.numel; ++i) norm += double(drawn[size_t(i)]) * drawn[size_t(i)];
    }
    const float scale = float(norm_near / std::sqrt(norm));
    for (const auto& e : params.entries()) {
      for (int64_t i = e.offset; i < e.offset + e.numel; ++i) grads[size_t(i)] = drawn[size_t(i)] * scale;
    }
    params.values().fill_(0.0);
    params.grads().copy_(Tensor::from_vector(grads, {params.total()}));
  }
  double norm64() const {
    double s = 0;
    for (float g : grads) s += double(g) * double(g);
    return std::sqrt(s);
  }
};

// Plain SGD with lr 1: the step writes -g (the clipped gradient) into the parameters.
const SgdConfig kPlain{1.0, 0.0, 0.0, 0.0, false};

TEST(ClipGradNorm, ScalesTheGradientAsClipGradNormDoesWithinAFloat64Bound) {
  for (double max_norm : {0.25, 1.0, 2.5}) {
    SCOPED_TRACE(max_norm);
    Job job(4.0);  // above every max_norm
    Sgd sgd(job.params, kPlain);
    sgd.set_clip_grad_norm(max_norm);
    sgd.step();
    const double norm64 = job.norm64();
    // Squares summed in double and rounded once to float, then a float sqrt: 2 roundings.
    EXPECT_NEAR(sgd.last_grad_norm(), norm64, 2 * kU * norm64);
    const double coef64 = max_norm / (norm64 + 1e-6);
    const std::vector<float> clipped = job.params.grads().to_vector<float>();
    const std::vector<float> values = job.params.values().to_vector<float>();
    // torch's float32 coefficient: its norm's 2 roundings, + 1e-6 and / (2 more), then each
    // product rounded once: 5 roundings relative.
    for (size_t i = 0; i < clipped.size(); ++i) {
      const double want = double(job.grads[i]) * coef64;
      EXPECT_NEAR(clipped[i], want, 5 * kU * std::fabs(want)) << i;
      EXPECT_EQ(values[i], -clipped[i]) << "the step used the clipped gradient, element " << i;
    }
    // The clipped gradient has norm max_norm (up to the same roundings).
    double clipped_norm = 0;
    for (float g : clipped) clipped_norm += double(g) * g;
    EXPECT_NEAR(std::sqrt(clipped_norm), max_norm * norm64 / (norm64 + 1e-6), 6 * kU * max_norm);
  }
}

// Bit for bit torch's float32 arithmetic on the norm the optimizer reports: coefficient
// float(max_norm) / (norm + 1e-6f), clamped to 1, each gradient multiplied by it.
TEST(ClipGradNorm, FollowsTorchsFloat32ArithmeticExactly) {
  for (double norm_near : {0.3, 1.0 + 1e-7, 7.0}) {
    SCOPED_TRACE(norm_near);
    Job job(norm_near);
    Sgd sgd(job.params, kPlain);
    sgd.set_clip_grad_norm(1.0);
    sgd.step();
    const float norm = float(sgd.last_grad_norm());
    const float coef = std::fmin(1.0f / (norm + 1e-6f), 1.0f);
    const std::vector<float> clipped = job.params.grads().to_vector<float>();
    for (size_t i = 0; i < clipped.size(); ++i) {
      const float want = job.grads[i] * coef;
      EXPECT_EQ(std::memcmp(&clipped[i], &want, sizeof(float)), 0) << i << ": " << clipped[i] << " vs " << want;
    }
  }
}

TEST(ClipGradNorm, ABelowMaxGradientIsLeftAloneAndMaxZeroZeroesIt) {
  Job small(0.5);
  Sgd sgd(small.params, kPlain);
  sgd.set_clip_grad_norm(1.0);
  sgd.step();
  EXPECT_EQ(small.params.grads().to_vector<float>(), small.grads) << "clamped to 1: untouched";

  Job any(3.0);
  Sgd zero(any.params, kPlain);
  zero.set_clip_grad_norm(0.0);
  zero.step();
  for (float g : any.params.grads().to_vector<float>()) EXPECT_EQ(g, 0.0f);
  for (float v : any.params.values().to_vector<float>()) EXPECT_EQ(v, 0.0f) << "max_norm 0: no step at all";
}

// Clipping comes before the update, whatever the optimizer: Adam with a clip equals Adam on
// the gradient the clip produced, bit for bit, step after step.
TEST(ClipGradNorm, AdamStepsOnTheClippedGradient) {
  const AdamConfig adamw{1e-2, 0.9, 0.999, 1e-8, 0.01, true};
  Job clipped_job(5.0), plain_job(5.0);
  Adam clipped(clipped_job.params, adamw), plain(plain_job.params, adamw);
  clipped.set_clip_grad_norm(2.0);
  for (int step = 0; step < 3; ++step) {
    clipped.step();
    // The same clipped gradient, by hand, into the optimizer that does not clip.
    const float coef = std::fmin(2.0f / (float(clipped.last_grad_norm()) + 1e-6f), 1.0f);
    std::vector<float> g = plain_job.grads;
    for (float& x : g) x *= coef;
    plain_job.params.grads().copy_(Tensor::from_vector(g, {plain_job.params.total()}));
    plain.step();
    EXPECT_EQ(clipped_job.params.values().to_vector<float>(), plain_job.params.values().to_vector<float>());
    clipped_job.params.grads().copy_(Tensor::from_vector(clipped_job.grads, {clipped_job.params.total()}));
  }
}

TEST(ClipGradNorm, SettingsAndReplay) {
  Job job(1.0);
  Sgd sgd(job.params, kPlain);
  EXPECT_TRUE(std::isnan(sgd.last_grad_norm())) << "no clip, no norm";
  EXPECT_TRUE(sgd.replayable());
  sgd.set_clip_grad_norm(1.0);
  EXPECT_FALSE(sgd.replayable()) << "the coefficient comes from the host: a recorded step cannot replay it";
  sgd.set_clip_grad_norm(-1);
  EXPECT_TRUE(sgd.replayable());
  EXPECT_THROW(sgd.set_clip_grad_norm(std::nan("")), Error);
  EXPECT_THROW(sgd.set_clip_grad_norm(INFINITY), Error);
}

}  // namespace
}  // namespace dpcore
