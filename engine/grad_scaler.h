// Dynamic loss scaling with torch.amp.GradScaler's semantics (torch.cuda.amp.GradScaler in
// PyTorch 1.13), for float16 training, where small gradients would underflow: the loss is
// multiplied by the scale before backward, the gradient buffer divided by it again before
// the optimizer step, and a step whose gradient holds an Inf or NaN (the scale was too
// large) is skipped. update() then halves the scale after such a step, and doubles it after
// growth_interval steps in a row without one (never to an infinity). The scale is a float32
// number as in PyTorch, and every product is rounded to float32 as PyTorch's
// _amp_update_scale_ rounds it, so the sequence of scales is PyTorch's bit for bit
// (tests/engine/grad_scaler_test.cpp). Every replica steps on the same reduced gradient,
// so each finds the same Inf or NaN and skips the same steps (as --skip-nonfinite does).
// Unlike PyTorch, found_inf is read back on the host once per step (PyTorch keeps it on
// the device and skips inside its kernels).
#pragma once

#include <cstdint>

#include "engine/optimizer.h"
#include "engine/tensor.h"

namespace dpcore {

struct GradScalerConfig {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// What a checkpoint keeps (PyTorch's state_dict: "scale", "_growth_tracker").
struct GradScalerState {
  float scale;
  int32_t growth_tracker;  // steps in a row without an Inf or NaN since the scale last changed
};

class GradScaler {
 public:
  // Fails naming the field unless init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1
  // and growth_interval > 0 (PyTorch's own checks).
  explicit GradScaler(const GradScalerConfig& config = {});

  // loss * scale, recorded for backward (the loss to call backward() on).
  Tensor scale(const Tensor& loss) const;
  // Divides the flat gradient buffer by the scale in place, in one pass that also looks for
  // an Inf or NaN (Backend::unscale_and_check_finite); returns whether it found one. Once
  // per step: a second call before update() fails (as PyTorch's unscale_ does).
  bool unscale(const Tensor& grads);
  // After unscale(), where each process holds a part of the gradients (pipeline stages in
  // processes of their own): whether any process found an Inf or NaN in its part, which
  // then counts as this step's finding on every one of them (PyTorch's ShardedGradScaler
  // all-reduces found_inf so). An `any` that misses this process's own finding fails.
  void set_found_inf_anywhere(bool any);
  // The optimizer step on its gradient buffer, unscaled first unless unscale() already
  // was; skipped when the gradient held an Inf or NaN. Returns whether it stepped.
  bool step(Optimizer& optimizer, const Tensor& grads);
  // The new scale from this step's finding: backoff after an Inf or NaN, growth after
  // growth_interval clean steps. Fails unless the step was unscaled.
  void update();

  float get_scale() const { return state_.scale; }
  const GradScalerConfig& config() const { return config_; }
  GradScalerState state() const { return state_; }
  // Fails naming the value unless the scale is finite and positive and the tracker in
  // [0, growth_interval).
  void load_state(const GradScalerState& state);

 private:
  GradScalerConfig config_;
  GradScalerState state_;
  enum class Stage { Ready, Unscaled } stage_ = Stage::Ready;
  bool found_inf_ = false;
  Tensor found_inf_flag_;  // one element on the gradients' device
};

}  // namespace dpcore
