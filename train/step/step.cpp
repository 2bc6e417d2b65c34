#include "train/step/step.h"

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/trace.h"
#include "kernels/index_check.h"

namespace dpcore::train {

std::vector<int64_t> even_split(int64_t n, int64_t parts) {
  DPCORE_CHECK(parts > 0, "split: ", parts, " parts requested");
  std::vector<int64_t> sizes(size_t(parts), n / parts);
  for (int64_t i = 0; i < n % parts; ++i) sizes[size_t(i)]++;
  return sizes;
}

double gradient_scale(int64_t counted) { return counted > 0 ? 1.0 / double(counted) : 0.0; }

int64_t counted_targets(const int64_t* labels, int64_t n) {
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) counted += labels[i] != kernels::kDefaultIgnoreIndex;
  return counted;
}

int64_t counted_targets(const Tensor& y) {
  const std::vector<int64_t> labels = y.to_vector<int64_t>();
  return counted_targets(labels.data(), int64_t(labels.size()));
}

Tensor forward_backward(Model& model, const Tensor& x, const Tensor& y, double grad_scale) {
  Tensor output;
  {
    trace::Span span("forward", [&] { return trace::Label{"forward", {{"rows", x.size(0)}}}; });
    output = model.ends_in_log_softmax() ? model.forward_logits(x) : model.forward(x);
  }
  Tensor loss_sum = loss_of(output, y, model.ends_in_log_softmax());
  loss_sum.backward(Tensor::full({}, grad_scale, loss_sum.dtype(), loss_sum.device()));
  return loss_sum.detach();
}

Tensor loss_of(const Tensor& output, const Tensor& y, bool logits) {
  trace::Span span("loss", [&] {
    return trace::Label{logits ? "loss (cross entropy)" : "loss (nll)", {{"input", shape_str(output.shape())}}};
  });
  return logits ? ops::cross_entropy(output, y, ops::Reduction::Sum) : ops::nll_loss(output, y, ops::Reduction::Sum);
}

Tensor accumulate_gradients(Model& model, const Tensor& x, const Tensor& y, int64_t accum, double grad_scale,
                            BatchStart start) {
  DPCORE_CHECK(x.dim() >= 1 && y.dim() >= 1 && x.size(0) == y.size(0), "train step: inputs ", x.str(),
               " and targets ", y.str(), " disagree on the batch size");
  int64_t n = x.size(0);
  DPCORE_CHECK(accum >= 1 && accum <= n, "train step: cannot split a batch of ", n, " into ", accum,
               " micro-batches");
  Tensor loss_sum = Tensor::zeros({}, model.dtype(), model.device());
  int64_t begin = 0;
  for (int64_t size : even_split(n, accum)) {
    model.set_batch_position(start.step, start.first_sample + begin);
    Tensor part = forward_backward(model, x.narrow0(begin, begin + size), y.narrow0(begin, begin + size), grad_scale);
    backend_for(loss_sum.device()).add(loss_sum, part, loss_sum);
    begin += size;
  }
  return loss_sum;
}

Tensor accumulate_and_step(Model& model, Optimizer& optimizer, const Tensor& x, const Tensor& y, int64_t accum,
                           int64_t counted, BatchStart start) {
  model.zero_grad();
  Tensor loss_sum = accumulate_gradients(model, x, y, accum, gradient_scale(counted), start);
  optimizer.step();
  return loss_sum;
}

double train_step(Model& model, Optimizer& optimizer, const Tensor& x, const Tensor& y, int64_t accum,
                  BatchStart start) {
  const int64_t counted = counted_targets(y);
  return accumulate_and_step(model, optimizer, x, y, accum, counted, start).item() / double(counted);
}

namespace {
// Eval mode for a scope, then back to the mode the model was in (also when it throws).
class EvalMode {
 public:
  explicit EvalMode(Model& model) : model_(model), was_training_(model.is_training()) { model_.eval(); }
  ~EvalMode() { model_.train(was_training_); }

 private:
  Model& model_;
  bool was_training_;
};
}  // namespace

EvalResult evaluate_batch(Model& model, const Tensor& x, const Tensor& y) {
  autograd::NoGradGuard no_grad;
  EvalMode eval_mode(model);
  Tensor logp = model.forward(x);
  DPCORE_CHECK(logp.numel() == y.numel() * model.num_classes(), "evaluation: output ", logp.str(), " for targets ",
               y.str(), " of ", model.num_classes(), " classes");
  EvalResult r;
  r.samples = x.size(0);
  Tensor host = logp.to(Device::cpu());
  auto targets = y.to_vector<int64_t>();
  const int64_t classes = model.num_classes();
  // (Per-token targets, e.g. masked-LM over a vocabulary, get no classes x classes table.)
  const bool per_sample = y.dim() == 1;
  if (per_sample) r.confusion.assign(size_t(classes * classes), 0);
  // Row i of the output's [targets, classes] view is target i's log-probabilities.
  auto add_up = [&](auto* p) {
    for (size_t i = 0; i < targets.size(); ++i) {
      const int64_t target = targets[i];
      if (target == kernels::kDefaultIgnoreIndex) continue;
      DPCORE_CHECK(target >= 0 && target < classes, "evaluation: target ", target, " at position ", i,
                   " is outside [0, ", classes, ") and is not ignore_index ", kernels::kDefaultIgnoreIndex);
      const auto* row = p + int64_t(i) * classes;
      int64_t best = 0;
      for (int64_t c = 1; c < classes; ++c) {
        if (row[c] > row[best]) best = c;
      }
      r.correct += best == target;
      if (per_sample) ++r.confusion[size_t(target * classes + best)];
      r.loss_sum -= double(row[target]);
      ++r.targets;
    }
  };
  if (host.dtype() == DType::Float32) add_up(host.data<float>());
  else add_up(host.data<double>());
  return r;
}

}  // namespace dpcore::train
