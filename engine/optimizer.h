// What every runner needs of an optimizer (train/: one device, dp, ddp, local SGD, async,
// shrink, checkpoints, resume), whichever it is: Sgd (engine/sgd.h) or Adam and AdamW
// (engine/adam.h). Each is ONE fused pass over the flat buffers; its state is tensors of the
// parameters' layout, by name, so that checkpoints, broadcasts, snapshots, replica checks
// and local SGD's averaging handle SGD's momentum and Adam's two moments alike.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/flat_parameters.h"
#include "kernels/adam_config.h"
#include "kernels/sgd_config.h"

namespace dpcore {

using SgdConfig = kernels::SgdConfig;
using AdamConfig = kernels::AdamConfig;

// One state tensor: its name ("momentum"; "exp_avg", "exp_avg_sq", PyTorch's names) and
// the tensor itself (a handle: writing into it writes the optimizer's state).
struct OptimizerState {
  std::string name;
  Tensor tensor;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter from the gradient buffer, counted; with a clip, after
  // scaling the gradient buffer as torch.nn.utils.clip_grad_norm_ does (set_clip_grad_norm).
  void step();
  // Gradient norm clipping (torch.nn.utils.clip_grad_norm_ with norm_type 2, before every
  // step): the L2 norm of the whole gradient buffer, summed in a fixed order
  // (Backend::sum_of_squares), and when max_norm / (norm + 1e-6) < 1 the buffer is scaled
  // by that coefficient, computed in float as PyTorch computes it. Negative: no clipping
  // (the default). Whatever reduced the gradient into this buffer (every runner steps on
  // the reduced gradient) makes the norm the same on every replica.
  void set_clip_grad_norm(double max_norm);
  double clip_grad_norm() const { return clip_grad_norm_; }
  // The norm the last step found, before clipping (NaN when it does not clip).
  double last_grad_norm() const { return last_grad_norm_; }
  // "sgd", "adam" or "adamw" (the --optimizer names).
  virtual std::string name() const = 0;
  // A new learning rate from the next step on (a schedule; PyTorch's param_group["lr"]).
  virtual void set_lr(double lr) = 0;
  // A new momentum from the next step on, as OneCycleLR cycles it: SGD's momentum, Adam's
  // beta1 (PyTorch's OneCycleLR cycles betas[0] of an Adam).
  virtual void set_momentum(double momentum) = 0;
  // The hyper-parameters the next step uses, in a fixed order: a runner that replays a
  // recorded step compares them with the recording's and records anew when they changed.
  virtual std::vector<double> hyper_parameters() const = 0;
  // Whether a recorded step (a CUDA graph) may be replayed for later steps: not when it
  // clips (the coefficient is computed on the host from the norm), nor when the update
  // passes the kernel scalars that change from step to step (Adam's bias correction).
  bool replayable() const { return clip_grad_norm_ < 0 && update_replayable(); }
  // The state tensors, in a fixed order (none for SGD without momentum).
  virtual std::vector<OptimizerState> state() const = 0;
  // The state tensor `name`; undefined when there is none of that name.
  Tensor state(const std::string& name) const;
  // Restores the state (tensors in the order of state(), of its sizes, on any device) and
  // the step count; fails naming what does not match.
  void restore(const std::vector<Tensor>& state, int64_t steps);

  int64_t steps_taken() const { return steps_; }
  // The step count alone (local SGD: a replica that sat out steps with an empty share takes
  // the run's count at the averaging that gives it the others' state).
  void set_steps_taken(int64_t steps);
  // A CUDA graph that contains step(): recording it runs nothing, so the step it counted is
  // taken back; each replay then counts one.
  void uncount_recorded_step() { --steps_; }
  void count_replayed_step() { ++steps_; }
  // Host seconds the last step() took (on a GPU, its launch), for the per-epoch breakdown
  // of train/observe/step_times.h.
  double last_step_seconds() const { return last_step_seconds_; }

 protected:
  explicit Optimizer(FlatParameters& params) : params_(params) {}
  // The update of step number steps_taken() + 1 (1 is the first) on `values`.
  virtual void apply(Tensor& values) = 0;
  virtual double lr() const = 0;
  virtual bool update_replayable() const = 0;

  FlatParameters& params_;

 private:
  void clip_gradients();

  int64_t steps_ = 0;
  double last_step_seconds_ = 0;
  double clip_grad_norm_ = -1;
  double last_grad_norm_ = std::nan("");
  Tensor sum_of_squares_;  // one element on the parameters' device, while clipping
};

// Which optimizer a run builds, with its hyper-parameters. Converts from either config, so
// that a runner built with an SgdConfig trains with SGD.
struct OptimizerConfig {
  enum class Kind { Sgd, Adam };  // AdamW: Adam with adam.decoupled
  OptimizerConfig(const SgdConfig& sgd = {}) : kind(Kind::Sgd), sgd(sgd) {}  // NOLINT: implicit on purpose
  OptimizerConfig(const AdamConfig& adam) : kind(Kind::Adam), adam(adam) {}  // NOLINT: implicit on purpose
  Kind kind;
  SgdConfig sgd;
  AdamConfig adam;
  double clip_grad_norm = -1;  // Optimizer::set_clip_grad_norm; negative: none
};

std::unique_ptr<Optimizer> make_optimizer(FlatParameters& params, const OptimizerConfig& config);

}  // namespace dpcore
