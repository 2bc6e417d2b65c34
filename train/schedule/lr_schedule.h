// Learning-rate schedules for `dpcore train --lr-schedule ... --warmup-steps W`.
//
// A schedule is a pure function of the optimizer step index t (0-based: the rates used BY
// step t), the base learning rate lr (--lr), the run's total steps T and the steps per
// epoch E. Being a pure function of t makes a resume exact: the checkpoint restores the
// step count, and the rates follow from it. The runner gets the rates before every step
// (StepRunner::set_rates), on every replica.
//
//   constant          lr.
//   step:EPOCHS:GAMMA lr * GAMMA^floor(t / (EPOCHS*E)): torch.optim.lr_scheduler.StepLR
//                     (step_size=EPOCHS, gamma=GAMMA) stepped once per epoch, here per step.
//   cosine            lr * (1 + cos(pi * t / T)) / 2: CosineAnnealingLR(T_max=T, eta_min=0)
//                     stepped once per step.
//   --warmup-steps W  (constant, step, cosine) lr * (t+1)/W for t < W: LambdaLR(lambda t:
//                     min(1, (t+1)/W)) chained before the schedule with SequentialLR
//                     (milestones=[W]); the schedule above then counts from t-W, cosine with
//                     T_max = T-W. W < T.
//   onecycle          OneCycleLR(max_lr=lr, total_steps=T, pct_start, anneal_strategy='cos',
//                     div_factor=25, final_div_factor=1e4, three_phase=False): the lr rises
//                     from lr/25 to lr over the steps up to pct_start*T-1, then falls to
//                     lr/25/1e4 at step T-1, each a half cosine, with PyTorch 1.13's
//                     formulas. pct_start is W/T with --warmup-steps W > 0, else 0.3. With
//                     --momentum > 0 the momentum cycles inversely, 0.95 -> 0.85 -> 0.95
//                     (cycle_momentum=True, max_momentum=0.95, base_momentum=0.85: --momentum
//                     only switches it on); with --momentum 0 it stays 0, not cycled.
//   linear            transformers' get_linear_schedule_with_warmup(num_warmup_steps=W,
//                     num_training_steps=T), BERT fine-tuning's: lr * t/W for t < W (0 at
//                     step 0: its own warm-up, not the one above), then
//                     lr * max(0, (T-t)/(T-W)), down to lr/(T-W) at the last step.
//
// Checked against Debian's PyTorch 1.13 by tests/train/lr_schedule_test.cpp (fixture from
// scripts/make_lr_schedule_fixture.py).
#pragma once

#include <cstdint>
#include <string>

#include "engine/sgd.h"

namespace dpcore::train {

// What the optimizer uses for one step.
struct Rates {
  double lr = 0, momentum = 0;
};

class LrSchedule {
 public:
  // `spec`: the --lr-schedule text; `sgd`: --lr and --momentum; `total_steps` T and
  // `steps_per_epoch` E of the run. Throws dpcore::Error naming the flag and the text.
  LrSchedule(const std::string& spec, const SgdConfig& sgd, int64_t warmup_steps, int64_t total_steps,
             int64_t steps_per_epoch);

  // The rates step t (0-based, 0 <= t < T) uses.
  Rates at(int64_t step) const;
  // For the run header: "constant 0.03", "onecycle to 0.1 (30% warm-up, momentum 0.95-0.85)".
  std::string describe() const;

 private:
  enum class Kind { Constant, Step, Cosine, OneCycle, Linear };
  Kind kind_ = Kind::Constant;
  int64_t step_epochs_ = 0;  // step:EPOCHS:GAMMA
  double gamma_ = 1;
  double lr_, momentum_;
  int64_t warmup_, total_, per_epoch_;
  // onecycle: pct_start, and the ends of its two phases as PyTorch computes them.
  double pct_start_ = 0.3, end_rise_ = 0, end_fall_ = 0;
};

// "" when `spec` is a valid --lr-schedule, else what it must be (for the CLI's message
// "--lr-schedule TEXT: must be ...").
std::string lr_schedule_needs(const std::string& spec);
// Whether the schedule depends on the run's total steps T (cosine, onecycle): a resumed run
// must then reach the same T.
bool lr_schedule_uses_total(const std::string& spec);

}  // namespace dpcore::train
