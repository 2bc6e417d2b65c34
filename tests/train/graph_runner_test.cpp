// The single-device runner's graph path, on the CPU: a backend that records kernel calls
// instead of running them (what a CUDA graph capture does) and replays them later stands
// in for CUDA, so that what the runner does around a graph is checked on every machine.
// It takes the CPU backend's place, as bench/timing_backend.h does, and follows the
// capture rules that matter here: recorded calls run only on replay, with the arguments
// (hyper-parameters, the first-step flag, the gradient scale) they were recorded with; a
// host copy or synchronisation while recording fails.
//
// Checked against plain eager steps, bit for bit: replaying, the loss each step returns
// (its own, not a buffer the next replay overwrites), recording anew when the learning
// rate, the first-step flag or a backend setting changes, and a failed recording falling
// back to eager steps with a warning and the right step count; rates that change at every
// step (a schedule) running eagerly rather than recording anew at every step.
#include <gtest/gtest.h>

#include <sstream>

#include "engine/sgd.h"
#include "engine/backend.h"
#include "kernels/index_check.h"
#include "layers/zoo.h"
#include "support/test_support.h"
#include "train/runners/runner.h"
#include "train/step/step.h"

namespace dpcore::train {
namespace {

class RecordingBackend : public Backend {
 public:
  RecordingBackend() : cpu_(*find_backend(Device::Type::CPU)) { register_backend(Device::Type::CPU, this); }
  ~RecordingBackend() override { register_backend(Device::Type::CPU, &cpu_); }

  int recordings = 0;             // record() calls that succeeded
  bool fail_recordings = false;   // record() throws after its body, as a capture invalidated late does
  bool graphs_enabled = true;     // make_graph answers null when off
  int setting = 0;                // a backend setting a recording bakes in (like --tf32)

  class Graph : public Captured {
   public:
    explicit Graph(RecordingBackend& backend) : backend_(backend) {}
    void warm_up(const std::function<void()>& body) override { body(); }
    void record(const std::function<void()>& body) override {
      recorded_setting_ = backend_.setting;
      backend_.tape_ = &tape_;
      try {
        body();
      } catch (...) {
        backend_.tape_ = nullptr;
        throw;
      }
      backend_.tape_ = nullptr;
      if (backend_.fail_recordings) throw Error("recording backend: capture invalidated");
      ++backend_.recordings;
    }
    void replay() override {
      for (auto& call : tape_) call();
    }
    bool stale() const override { return !backend_.graphs_enabled || backend_.setting != recorded_setting_; }

   private:
    RecordingBackend& backend_;
    std::vector<std::function<void()>> tape_;
    int recorded_setting_ = 0;
  };

  std::unique_ptr<Captured> make_graph(int) override {
    return graphs_enabled ? std::make_unique<Graph>(*this) : nullptr;
  }

  std::string name() const override { return "recording cpu"; }
  int device_count() const override { return 1; }
  Allocator& allocator(int device_index) override { return cpu_.allocator(device_index); }
  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override {
    DPCORE_CHECK(!tape_, "recording backend: a host copy while recording");
    cpu_.copy_bytes(dst, dst_device, src, src_device, bytes);
  }
  void synchronize(int device_index) override {
    DPCORE_CHECK(!tape_, "recording backend: a synchronisation while recording");
    cpu_.synchronize(device_index);
  }
  void set_option(const std::string& name, const std::string& value) override { cpu_.set_option(name, value); }

  // Every kernel: run now, or onto the tape with its arguments as they are now. Tensors are
  // handles, so the recorded call works on the same memory later.
  void conv2d_forward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                      Tensor& y) override {
    run([=, b = opt(bias), y = y]() mutable { cpu_.conv2d_forward(s, x, w, ptr(b), y); });
  }
  void conv2d_backward_data(const kernels::Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.conv2d_backward_data(s, dy, w, dx); });
  }
  void conv2d_backward_weight(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                              Tensor* dbias, bool accumulate) override {
    run([=, dw = dw, db = opt(dbias)]() mutable { cpu_.conv2d_backward_weight(s, x, dy, dw, ptr(db), accumulate); });
  }
  void conv2d_relu_forward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                           Tensor& y) override {
    run([=, b = opt(bias), y = y]() mutable { cpu_.conv2d_relu_forward(s, x, w, ptr(b), y); });
  }
  void linear_forward(const kernels::LinearShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                      Tensor& y) override {
    run([=, b = opt(bias), y = y]() mutable { cpu_.linear_forward(s, x, w, ptr(b), y); });
  }
  void linear_backward_data(const kernels::LinearShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.linear_backward_data(s, dy, w, dx); });
  }
  void linear_backward_weight(const kernels::LinearShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                              Tensor* dbias, bool accumulate) override {
    run([=, dw = dw, db = opt(dbias)]() mutable { cpu_.linear_backward_weight(s, x, dy, dw, ptr(db), accumulate); });
  }
  void max_pool2d_forward(const kernels::Pool2dShape& s, const Tensor& x, Tensor& y, Tensor& argmax) override {
    run([=, y = y, argmax = argmax]() mutable { cpu_.max_pool2d_forward(s, x, y, argmax); });
  }
  void max_pool2d_backward(const kernels::Pool2dShape& s, const Tensor& dy, const Tensor& argmax, Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.max_pool2d_backward(s, dy, argmax, dx); });
  }
  void max_pool2d_relu_backward(const kernels::Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                                const Tensor& relu_y, Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.max_pool2d_relu_backward(s, dy, argmax, relu_y, dx); });
  }
  void batch_norm2d_stats(const kernels::BatchNorm2dShape& s, const Tensor& x, Tensor& mean, Tensor& var) override {
    run([=, mean = mean, var = var]() mutable { cpu_.batch_norm2d_stats(s, x, mean, var); });
  }
  void batch_norm2d_combine_stats(const kernels::BatchNorm2dShape& s, int64_t replicas, const Tensor& gathered,
                                  Tensor& mean, Tensor& var) override {
    run([=, mean = mean, var = var]() mutable { cpu_.batch_norm2d_combine_stats(s, replicas, gathered, mean, var); });
  }
  void batch_norm2d_finalize(const kernels::BatchNorm2dShape& s, const Tensor& mean, const Tensor& var, double eps,
                             double momentum, Tensor& invstd, Tensor* running_mean, Tensor* running_var) override {
    run([=, invstd = invstd, rm = opt(running_mean), rv = opt(running_var)]() mutable {
      cpu_.batch_norm2d_finalize(s, mean, var, eps, momentum, invstd, ptr(rm), ptr(rv));
    });
  }
  void batch_norm2d_apply(const kernels::BatchNorm2dShape& s, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                          const Tensor* weight, const Tensor* bias, Tensor& y) override {
    run([=, w = opt(weight), b = opt(bias), y = y]() mutable {
      cpu_.batch_norm2d_apply(s, x, mean, invstd, ptr(w), ptr(b), y);
    });
  }
  void batch_norm2d_backward_reduce(const kernels::BatchNorm2dShape& s, const Tensor& dy, const Tensor& x,
                                    const Tensor& mean, const Tensor& invstd, Tensor* sum_dy, Tensor* sum_dy_xhat,
                                    Tensor* dweight, Tensor* dbias, bool accumulate) override {
    run([=, sd = opt(sum_dy), sdx = opt(sum_dy_xhat), dw = opt(dweight), db = opt(dbias)]() mutable {
      cpu_.batch_norm2d_backward_reduce(s, dy, x, mean, invstd, ptr(sd), ptr(sdx), ptr(dw), ptr(db), accumulate);
    });
  }
  void batch_norm2d_backward_apply(const kernels::BatchNorm2dShape& s, const Tensor& dy, const Tensor& x,
                                   const Tensor& mean, const Tensor& invstd, const Tensor* weight, const Tensor* sum_dy,
                                   const Tensor* sum_dy_xhat, Tensor& dx) override {
    run([=, w = opt(weight), sd = opt(sum_dy), sdx = opt(sum_dy_xhat), dx = dx]() mutable {
      cpu_.batch_norm2d_backward_apply(s, dy, x, mean, invstd, ptr(w), ptr(sd), ptr(sdx), dx);
    });
  }
  void relu_forward(const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.relu_forward(x, y); });
  }
  void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.relu_backward(dy, y, dx); });
  }
  void avg_pool2d_forward(const kernels::Pool2dShape& s, bool count_include_pad, const Tensor& x,
                          Tensor& y) override {
    run([=, y = y]() mutable { cpu_.avg_pool2d_forward(s, count_include_pad, x, y); });
  }
  void avg_pool2d_backward(const kernels::Pool2dShape& s, bool count_include_pad, const Tensor& dy,
                           Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.avg_pool2d_backward(s, count_include_pad, dy, dx); });
  }
  void global_avg_pool2d_forward(const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.global_avg_pool2d_forward(x, y); });
  }
  void global_avg_pool2d_backward(const Tensor& dy, Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.global_avg_pool2d_backward(dy, dx); });
  }
  void log_softmax_forward(const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.log_softmax_forward(x, y); });
  }
  void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.log_softmax_backward(dy, y, dx); });
  }
  void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& loss_sum) override {
    run([=, loss_sum = loss_sum]() mutable { cpu_.nll_loss_forward(logp, target, loss_sum); });
  }
  void nll_loss_backward(const Tensor& grad_per_row, const Tensor& target, Tensor& dlogp) override {
    run([=, dlogp = dlogp]() mutable { cpu_.nll_loss_backward(grad_per_row, target, dlogp); });
  }
  void cross_entropy_forward_backward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                      const Tensor* divisor, Tensor& loss, Tensor& dlogits) override {
    run([=, divisor = opt(divisor), loss = loss, dlogits = dlogits]() mutable {
      cpu_.cross_entropy_forward_backward(logits, target, ignore_index, divisor.defined() ? &divisor : nullptr, loss,
                                          dlogits);
    });
  }
  void check_indices(const kernels::IndexCheck& check, const Tensor& indices) override {
    run([=] { cpu_.check_indices(check, indices); });
  }
  void fill(Tensor& y, double value) override {
    run([=, y = y]() mutable { cpu_.fill(y, value); });
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.add(a, b, y); });
  }
  void axpy(double alpha, const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.axpy(alpha, x, y); });
  }
  void scale(double alpha, const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.scale(alpha, x, y); });
  }
  void scale_by(const Tensor& s, const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.scale_by(s, x, y); });
  }
  void sum(const Tensor& x, Tensor& out) override {
    run([=, out = out]() mutable { cpu_.sum(x, out); });
  }
  void sum_of_squares(const Tensor& x, Tensor& out) override {
    run([=, out = out]() mutable { cpu_.sum_of_squares(x, out); });
  }
  void unscale_and_check_finite(float inv_scale, Tensor& x, Tensor& found_inf) override {
    run([=, x = x, found_inf = found_inf]() mutable { cpu_.unscale_and_check_finite(inv_scale, x, found_inf); });
  }
  void sgd_step(const kernels::SgdConfig& cfg, bool first_step, Tensor& param, const Tensor& grad,
                Tensor& momentum) override {
    run([=, param = param, momentum = momentum]() mutable { cpu_.sgd_step(cfg, first_step, param, grad, momentum); });
  }
  void adam_step(const kernels::AdamConfig& cfg, int64_t step, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                 Tensor& exp_avg_sq, const Tensor& decay_mask) override {
    run([=, param = param, exp_avg = exp_avg, exp_avg_sq = exp_avg_sq]() mutable {
      cpu_.adam_step(cfg, step, param, grad, exp_avg, exp_avg_sq, decay_mask);
    });
  }
  // ---- gelu, tanh, dropout (issue 24) ----
  void gelu_forward(kernels::GeluApproximate form, const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.gelu_forward(form, x, y); });
  }
  void gelu_backward(kernels::GeluApproximate form, const Tensor& dy, const Tensor& x, Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.gelu_backward(form, dy, x, dx); });
  }
  void tanh_forward(const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.tanh_forward(x, y); });
  }
  void tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.tanh_backward(dy, y, dx); });
  }
  void dropout(const kernels::DropoutConfig& cfg, const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.dropout(cfg, x, y); });
  }
  // scaled_dot_product_attention
  void attention_forward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& key_mask, Tensor& o, Tensor& lse) override {
    run([=, o = o, lse = lse]() mutable { cpu_.attention_forward(s, q, k, v, key_mask, o, lse); });
  }
  void attention_backward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& key_mask, const Tensor& o, const Tensor& lse, const Tensor& dout, Tensor& dq,
                          Tensor& dk, Tensor& dv) override {
    run([=, dq = dq, dk = dk, dv = dv]() mutable {
      cpu_.attention_backward(s, q, k, v, key_mask, o, lse, dout, dq, dk, dv);
    });
  }
  // batched_matmul
  void batched_matmul(const kernels::BatchedMatmulShape& s, const Tensor& a, const Tensor& b, Tensor& c) override {
    run([=, c = c]() mutable { cpu_.batched_matmul(s, a, b, c); });
  }
  // embedding
  void embedding_forward(const Tensor& ids, const Tensor& weight, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.embedding_forward(ids, weight, y); });
  }
  void embedding_backward(const Tensor& ids, const Tensor& dy, int64_t padding_idx, Tensor& dweight,
                          bool accumulate) override {
    run([=, dweight = dweight]() mutable { cpu_.embedding_backward(ids, dy, padding_idx, dweight, accumulate); });
  }
  // cross_entropy's count of tokens
  void count_targets(const Tensor& target, int64_t ignore_index, Tensor& counted) override {
    run([=, counted = counted]() mutable { cpu_.count_targets(target, ignore_index, counted); });
  }
  // layer_norm
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                          Tensor& mean, Tensor& rstd) override {
    run([=, y = y, mean = mean, rstd = rstd]() mutable { cpu_.layer_norm_forward(x, weight, bias, eps, y, mean, rstd); });
  }
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate) override {
    run([=, dx = dx, dw = dweight, db = dbias]() mutable {
      cpu_.layer_norm_backward(dy, x, weight, mean, rstd, dx, dw, db, accumulate);
    });
  }
  // softmax
  void softmax_forward(const kernels::SoftmaxShape& s, const Tensor& x, const Tensor& mask, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.softmax_forward(s, x, mask, y); });
  }
  void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    run([=, dx = dx]() mutable { cpu_.softmax_backward(dy, y, dx); });
  }
  void transpose(const kernels::TransposeShape& s, const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.transpose(s, x, y); });
  }
  void cast(const Tensor& x, Tensor& y) override {
    run([=, y = y]() mutable { cpu_.cast(x, y); });
  }

 private:
  static Tensor opt(const Tensor* t) { return t ? *t : Tensor(); }
  static Tensor* ptr(Tensor& t) { return t.defined() ? &t : nullptr; }
  template <class Call>
  void run(Call call) {
    if (tape_) tape_->push_back(std::move(call));
    else call();
  }

  Backend& cpu_;
  std::vector<std::function<void()>>* tape_ = nullptr;  // set while a graph records
};

const Shape kInput = {1, 6, 6};
constexpr int64_t kBatch = 8;

std::unique_ptr<layers::Model> small_model() {
  return std::make_unique<layers::Model>(layers::parse_layer_spec("conv(3,3,p1) relu pool(2) flatten linear(5)", kInput),
                                         kInput, Device::cpu(), DType::Float32, 7);
}

// Batch number `step`: different data every step, so a replay that read stale inputs shows.
struct HostBatch {
  std::vector<float> images;
  std::vector<int64_t> labels;
  data::Batch view;
  // (The first `ignored` labels are ignore_index.)
  explicit HostBatch(int step, int64_t size = kBatch, int64_t ignored = 0) {
    images = testing::random_vector<float>(size_t(size * 36), uint64_t(100 + step));
    for (int64_t i = 0; i < size; ++i) labels.push_back(i < ignored ? kernels::kDefaultIgnoreIndex : (i * 3 + step) % 5);
    view.size = size, view.sample = {1, 6, 6};
    view.images = images.data(), view.labels = labels.data();
  }
};

// The same model trained with eager steps only, step by step beside the runner.
struct Reference {
  std::unique_ptr<layers::Model> model = small_model();
  Sgd sgd;
  explicit Reference(const SgdConfig& config) : sgd(model->parameters(), config) {}
  double step(const HostBatch& b) {
    auto [x, y] = batch_tensors(b.view, Device::cpu());
    return accumulate_and_step(*model, sgd, x, y, 2, counted_targets(b.view)).item();
  }
};

const SgdConfig kSgd{0.05, 0.9, 0.1, 0.01, false};  // dampening: the first step differs from the others

std::vector<float> values(layers::Model& m) { return m.parameters().values().to_vector<float>(); }

TEST(GraphRunner, ReplaysMatchEagerStepsAndEachLossIsTheStepsOwn) {
  RecordingBackend backend;
  SingleDeviceRunner runner(small_model(), kSgd, 2);
  Reference ref(kSgd);
  std::vector<Tensor> losses;
  std::vector<double> expected;
  for (int step = 0; step < 6; ++step) {
    HostBatch b(step);
    losses.push_back(runner.step(b.view).loss_sum);
    expected.push_back(ref.step(b));
    EXPECT_EQ(runner.replaying(), step + 1 >= SingleDeviceRunner::kWarmupSteps) << "after step " << step;
  }
  EXPECT_EQ(backend.recordings, 1);
  EXPECT_EQ(runner.optimizer().steps_taken(), 6);
  EXPECT_EQ(values(runner.model()), values(*ref.model));
  // Read only now, after later replays: each step's loss is still that step's.
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_EQ(losses[i].item(), expected[i]) << "step " << i;
}

TEST(GraphRunner, ABatchOfAnotherSizeRunsEagerly) {
  RecordingBackend backend;
  SingleDeviceRunner runner(small_model(), kSgd, 2);
  Reference ref(kSgd);
  for (int step = 0; step < 5; ++step) {
    HostBatch b(step, step == 3 ? 5 : kBatch);
    EXPECT_EQ(runner.step(b.view).loss_sum.item(), ref.step(b)) << "step " << step;
  }
  EXPECT_EQ(backend.recordings, 1);
  EXPECT_EQ(values(runner.model()), values(*ref.model));
}

// A batch of the recorded size whose counted targets differ (ignore_index labels) needs
// another gradient scale than the one recorded: it runs eagerly, and the next batch with
// the recorded count replays again.
TEST(GraphRunner, ABatchWithAnotherCountOfTargetsRunsEagerly) {
  RecordingBackend backend;
  SingleDeviceRunner runner(small_model(), kSgd, 2);
  Reference ref(kSgd);
  for (int step = 0; step < 5; ++step) {
    HostBatch b(step, kBatch, step == 3 ? 2 : 0);
    const StepStats stats = runner.step(b.view);
    EXPECT_EQ(stats.loss_sum.item(), ref.step(b)) << "step " << step;
    EXPECT_EQ(stats.targets, step == 3 ? kBatch - 2 : kBatch);
  }
  EXPECT_EQ(backend.recordings, 1);
  EXPECT_TRUE(runner.replaying());
  EXPECT_EQ(values(runner.model()), values(*ref.model));
}

TEST(GraphRunner, ALearningRateChangeIsRecordedAnew) {
  // The change meets a short batch first: the new recording still waits for the
  // recorded size.
  RecordingBackend backend;
  SingleDeviceRunner runner(small_model(), kSgd, 2);
  Reference ref(kSgd);
  for (int step = 0; step < 8; ++step) {
    if (step == 4) {
      runner.optimizer().set_lr(0.2);
      ref.sgd.set_lr(0.2);
    }
    HostBatch b(step, step == 4 ? 5 : kBatch);
    runner.step(b.view);
    ref.step(b);
  }
  EXPECT_EQ(backend.recordings, 2);
  EXPECT_TRUE(runner.replaying());
  EXPECT_EQ(values(runner.model()), values(*ref.model));
  EXPECT_EQ(runner.optimizer().steps_taken(), 8);
}

// A schedule sets the rates before every step (set_rates). Rates that change at every step
// would need a new recording for each: those steps run eagerly instead, with one note on
// stderr; once the rates hold still (a warm-up ended), the runner records again and replays.
TEST(GraphRunner, RatesChangingEveryStepRunEagerlyUntilTheyHoldStill) {
  RecordingBackend backend;
  SingleDeviceRunner runner(small_model(), kSgd, 2);
  Reference ref(kSgd);
  std::ostringstream notes;
  std::streambuf* stderr_buffer = std::cerr.rdbuf(notes.rdbuf());
  for (int step = 0; step < 12; ++step) {
    const bool warming = step < 8;  // lr and momentum change at every step, then hold still
    const double lr = warming ? 0.01 * (step + 1) : 0.08, momentum = warming ? 0.95 - 0.01 * step : 0.88;
    runner.set_rates(lr, momentum);
    ref.sgd.set_lr(lr);
    ref.sgd.set_momentum(momentum);
    HostBatch b(step);
    EXPECT_EQ(runner.step(b.view).loss_sum.item(), ref.step(b)) << "step " << step;
    if (step == 7) {
      EXPECT_EQ(backend.recordings, 0) << "rates that change at every step are never recorded";
      EXPECT_FALSE(runner.replaying());
    }
  }
  std::cerr.rdbuf(stderr_buffer);
  EXPECT_EQ(backend.recordings, 1) << "recorded once the rates held still";
  EXPECT_TRUE(runner.replaying());
  EXPECT_EQ(values(runner.model()), values(*ref.model));
  EXPECT_EQ(runner.optimizer().steps_taken(), 12);
  EXPECT_EQ(dynamic_cast<Sgd&>(runner.optimizer()).config().momentum, 0.88);
  EXPECT_EQ(notes.str(),
            "dpcore: note: the learning rate or momentum changes at every step (--lr-schedule, --warmup-steps); such "
            "steps run without a CUDA graph, which would have to be recorded anew for each\n");
}

TEST(GraphRunner, AConstantScheduleStillReplays) {
  RecordingBackend backend;
  SingleDeviceRunner runner(small_model(), kSgd, 2);
  Reference ref(kSgd);
  for (int step = 0; step < 6; ++step) {
    runner.set_rates(kSgd.lr, kSgd.momentum);  // what --lr-schedule constant sets before every step
    HostBatch b(step);
    EXPECT_EQ(runner.step(b.view).loss_sum.item(), ref.step(b)) << "step " << step;
  }
  EXPECT_EQ(backend.recordings, 1);
  EXPECT_TRUE(runner.replaying());
  EXPECT_EQ(values(runner.model()), values(*ref.model));
}

TEST(GraphRunner, RestartingTheStepCountIsRecordedAnew) {
  // Step 0 initialises the momentum buffer (dampening does not apply): a graph recorded
  // at a later step must not be replayed for it.
  RecordingBackend backend;
  SingleDeviceRunner runner(small_model(), kSgd, 2);
  Reference ref(kSgd);
  for (int step = 0; step < 7; ++step) {
    if (step == 4) {
      Tensor zeros = Tensor::zeros({runner.model().parameters().total()});
      runner.optimizer().restore({zeros}, 0);
      ref.sgd.restore({zeros}, 0);
    }
    HostBatch b(step);
    runner.step(b.view);
    ref.step(b);
  }
  EXPECT_EQ(backend.recordings, 2);
  EXPECT_EQ(values(runner.model()), values(*ref.model));
}

TEST(GraphRunner, ABackendSettingChangeIsRecordedAnewAndGraphsOffRunsEagerly) {
  RecordingBackend backend;
  SingleDeviceRunner runner(small_model(), kSgd, 2);
  Reference ref(kSgd);
  for (int step = 0; step < 9; ++step) {
    if (step == 4) backend.setting = 1;         // like --tf32 on
    if (step == 6) backend.graphs_enabled = false;  // like --cuda-graph off
    HostBatch b(step);
    runner.step(b.view);
    ref.step(b);
    if (step == 4) EXPECT_TRUE(runner.replaying()) << "the step after the change records anew";
  }
  EXPECT_EQ(backend.recordings, 2);
  EXPECT_FALSE(runner.replaying());
  EXPECT_EQ(values(runner.model()), values(*ref.model));
}

TEST(GraphRunner, AFailedRecordingWarnsAndTrainingGoesOnEagerly) {
  RecordingBackend backend;
  backend.fail_recordings = true;
  SingleDeviceRunner runner(small_model(), kSgd, 2);
  Reference ref(kSgd);
  std::ostringstream warnings;
  std::streambuf* stderr_buffer = std::cerr.rdbuf(warnings.rdbuf());
  for (int step = 0; step < 5; ++step) {
    HostBatch b(step);
    EXPECT_EQ(runner.step(b.view).loss_sum.item(), ref.step(b)) << "step " << step;
    EXPECT_EQ(runner.optimizer().steps_taken(), step + 1) << "the failed recording counted a step";
  }
  std::cerr.rdbuf(stderr_buffer);
  EXPECT_FALSE(runner.replaying());
  EXPECT_EQ(values(runner.model()), values(*ref.model));
  EXPECT_EQ(warnings.str(),
            "dpcore: warning: recording backend: capture invalidated; training goes on without a CUDA graph\n");
}

// Dropout draws its masks by the step number (layers/module.h, BatchPosition), which a
// recorded step would hold fixed: every replay would drop what the recorded step dropped.
// A model that draws random numbers in training therefore trains eagerly, step for step
// as the eager reference with each step's own masks.
TEST(GraphRunner, AModelWithDropoutTrainsEagerlyWithEachStepsMasks) {
  RecordingBackend backend;
  const Shape input{4, 6};
  auto make = [&] {
    auto net = layers::parse_layer_spec("encoder(heads=2,ff=8,dropout=0.3) meanpool linear(5)", input);
    return std::make_unique<layers::Model>(std::move(net), input, Device::cpu(), DType::Float32, 7);
  };
  SingleDeviceRunner runner(make(), kSgd, 2);
  auto reference = make();
  Sgd sgd(reference->parameters(), kSgd);
  for (int step = 0; step < 5; ++step) {
    HostBatch b(step);
    b.view.sample = input;  // [8, 4, 6]: the first 192 of the batch's values
    runner.set_step_number(step + 1);
    runner.step(b.view);
    auto [x, y] = batch_tensors(b.view, Device::cpu());
    accumulate_and_step(*reference, sgd, x, y, 2, counted_targets(b.view), {uint64_t(step + 1), 0});
  }
  EXPECT_EQ(backend.recordings, 0);
  EXPECT_FALSE(runner.replaying());
  EXPECT_EQ(values(runner.model()), values(*reference));
}

// A BERT step over token ids copies nothing between host and device once warm (the
// key-padding mask is built on the device from the ids, the position ids kept from the step
// before), so the runner records it and replays it, bit for bit as eager steps, padding
// included. (The masked-LM head: the classification head's pooler takes the first token
// with a copy, which this recording backend refuses as it refuses every copy.)
TEST(GraphRunner, ABertStepIsRecordedAndReplaysAsEagerSteps) {
  RecordingBackend backend;
  auto make = [] {
    layers::ModelDef def = layers::model_from_flag(
        "bert(layers=1,hidden=8,heads=2,intermediate=16,vocab=20,max_len=8,dropout=0,head=mlm)", {6});
    return std::make_unique<layers::Model>(std::move(def.net), def.input_shape, Device::cpu(), DType::Float32, 7);
  };
  SingleDeviceRunner runner(make(), kSgd, 2);
  auto reference = make();
  Sgd sgd(reference->parameters(), kSgd);
  for (int step = 0; step < 5; ++step) {
    std::vector<int64_t> ids, labels;
    for (int64_t i = 0; i < kBatch; ++i) {
      // Real tokens, then padding (id 0); as many counted targets at every step (33), so
      // that the steps after the recording replay it.
      const int64_t real = i < 6 ? 1 + (i + 2 * step) % 6 : 6;
      for (int64_t k = 0; k < 6; ++k) {
        ids.push_back(k < real ? 1 + (i * 7 + k * 3 + step) % 19 : 0);
        labels.push_back(k < real ? (i + k + step) % 20 : kernels::kDefaultIgnoreIndex);
      }
    }
    data::Batch b;
    b.size = kBatch, b.sample = {6}, b.ids = ids.data(), b.labels = labels.data(), b.labels_per_sample = 6;
    const double loss = runner.step(b).loss_sum.item();
    auto [x, y] = batch_tensors(b, Device::cpu());
    EXPECT_EQ(loss, accumulate_and_step(*reference, sgd, x, y, 2, counted_targets(b)).item()) << "step " << step;
  }
  EXPECT_EQ(backend.recordings, 1);
  EXPECT_TRUE(runner.replaying());
  EXPECT_EQ(runner.optimizer().steps_taken(), 5);
  EXPECT_EQ(values(runner.model()), values(*reference));
}

}  // namespace
}  // namespace dpcore::train
