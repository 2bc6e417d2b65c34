// TimingBackend: the CPU backend with a stopwatch around every kernel call and every
// allocation, for `dpcore_step_bench --profile`: where a training step's time goes, op by
// op. It changes nothing in the engine: it wraps the registered CPU backend and takes its
// place through the public register_backend, so every op dispatched afterwards passes
// through it. CPU only (a CUDA kernel call returns before the GPU has run it) and one
// thread calling in (one replica): the counters are plain numbers.
//
// Every method of Backend is forwarded (a new pure virtual there must be added here; the
// compiler says so). What the stopwatch does not see is the engine around the kernels
// (building and walking the autograd graph, shape checks, tensor handles): the caller gets
// it as the step time minus the sum of these.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "engine/backend.h"

namespace dpcore::bench {

struct OpTime {
  int64_t calls = 0;
  double seconds = 0;
};
using OpTimes = std::map<std::string, OpTime>;

// Adds the time `f` takes to times[name].
template <class F>
void timed(OpTimes& times, const char* name, F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  OpTime& t = times[name];
  t.calls++;
  t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// malloc and free, timed. Page faults on first touch of new memory are not in here: they
// land in the first kernel that writes the memory.
class TimingAllocator : public Allocator {
 public:
  TimingAllocator(Allocator& inner, OpTimes& times) : inner_(inner), times_(times) {}
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    timed(times_, "allocate", [&] { p = inner_.allocate(bytes); });
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    timed(times_, "free", [&] { inner_.deallocate(ptr, bytes); });
  }
  size_t bytes_in_use() const override { return inner_.bytes_in_use(); }
  size_t peak_bytes() const override { return inner_.peak_bytes(); }
  void reset_peak() override { inner_.reset_peak(); }

 private:
  Allocator& inner_;
  OpTimes& times_;
};

class TimingBackend : public Backend {
 public:
  explicit TimingBackend(Backend& inner) : inner_(inner), allocator_(inner.allocator(0), times_) {}

  // Registers a TimingBackend in place of the CPU backend; it lives until the process
  // ends, since tensors made from now on keep pointers to its allocator.
  static TimingBackend& install() {
    static TimingBackend timing(backend_for(Device::cpu()));
    register_backend(Device::Type::CPU, &timing);
    return timing;
  }

  OpTimes& times() { return times_; }

  std::string name() const override { return inner_.name(); }
  int device_count() const override { return inner_.device_count(); }
  Allocator& allocator(int) override { return allocator_; }
  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override {
    timed(times_, "copy", [&] { inner_.copy_bytes(dst, dst_device, src, src_device, bytes); });
  }
  void synchronize(int device_index) override { inner_.synchronize(device_index); }
  void set_option(const std::string& name, const std::string& value) override { inner_.set_option(name, value); }
  std::unique_ptr<Captured> make_graph(int device_index) override { return inner_.make_graph(device_index); }
  void use_thread_stream(int device_index, int index) override { inner_.use_thread_stream(device_index, index); }
  void* alloc_host(size_t bytes) override { return inner_.alloc_host(bytes); }
  void free_host(void* ptr) override { inner_.free_host(ptr); }

  void conv2d_forward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                      Tensor& y) override {
    timed(times_, "conv2d forward", [&] { inner_.conv2d_forward(s, x, w, bias, y); });
  }
  void conv2d_backward_data(const kernels::Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) override {
    timed(times_, "conv2d backward data", [&] { inner_.conv2d_backward_data(s, dy, w, dx); });
  }
  void conv2d_backward_weight(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                              Tensor* dbias, bool accumulate) override {
    timed(times_, "conv2d backward weight", [&] { inner_.conv2d_backward_weight(s, x, dy, dw, dbias, accumulate); });
  }
  void conv2d_relu_forward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                           Tensor& y) override {
    timed(times_, "conv2d+relu forward", [&] { inner_.conv2d_relu_forward(s, x, w, bias, y); });
  }
  void linear_forward(const kernels::LinearShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                      Tensor& y) override {
    timed(times_, "linear forward", [&] { inner_.linear_forward(s, x, w, bias, y); });
  }
  void linear_backward_data(const kernels::LinearShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) override {
    timed(times_, "linear backward data", [&] { inner_.linear_backward_data(s, dy, w, dx); });
  }
  void linear_backward_weight(const kernels::LinearShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                              Tensor* dbias, bool accumulate) override {
    timed(times_, "linear backward weight", [&] { inner_.linear_backward_weight(s, x, dy, dw, dbias, accumulate); });
  }
  void max_pool2d_forward(const kernels::Pool2dShape& s, const Tensor& x, Tensor& y, Tensor& argmax) override {
    timed(times_, "max_pool2d forward", [&] { inner_.max_pool2d_forward(s, x, y, argmax); });
  }
  void max_pool2d_backward(const kernels::Pool2dShape& s, const Tensor& dy, const Tensor& argmax, Tensor& dx) override {
    timed(times_, "max_pool2d backward", [&] { inner_.max_pool2d_backward(s, dy, argmax, dx); });
  }
  void max_pool2d_relu_backward(const kernels::Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                                const Tensor& relu_y, Tensor& dx) override {
    timed(times_, "max_pool2d+relu backward", [&] { inner_.max_pool2d_relu_backward(s, dy, argmax, relu_y, dx); });
  }
  void batch_norm2d_stats(const kernels::BatchNorm2dShape& s, const Tensor& x, Tensor& mean, Tensor& var) override {
    timed(times_, "batch_norm2d stats", [&] { inner_.batch_norm2d_stats(s, x, mean, var); });
  }
  void batch_norm2d_combine_stats(const kernels::BatchNorm2dShape& s, int64_t replicas, const Tensor& gathered,
                                  Tensor& mean, Tensor& var) override {
    timed(times_, "batch_norm2d combine_stats",
          [&] { inner_.batch_norm2d_combine_stats(s, replicas, gathered, mean, var); });
  }
  void batch_norm2d_finalize(const kernels::BatchNorm2dShape& s, const Tensor& mean, const Tensor& var, double eps,
                             double momentum, Tensor& invstd, Tensor* running_mean, Tensor* running_var) override {
    timed(times_, "batch_norm2d finalize",
          [&] { inner_.batch_norm2d_finalize(s, mean, var, eps, momentum, invstd, running_mean, running_var); });
  }
  void batch_norm2d_apply(const kernels::BatchNorm2dShape& s, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                          const Tensor* weight, const Tensor* bias, Tensor& y) override {
    timed(times_, "batch_norm2d apply", [&] { inner_.batch_norm2d_apply(s, x, mean, invstd, weight, bias, y); });
  }
  void batch_norm2d_backward_reduce(const kernels::BatchNorm2dShape& s, const Tensor& dy, const Tensor& x,
                                    const Tensor& mean, const Tensor& invstd, Tensor* sum_dy, Tensor* sum_dy_xhat,
                                    Tensor* dweight, Tensor* dbias, bool accumulate) override {
    timed(times_, "batch_norm2d backward reduce", [&] {
      inner_.batch_norm2d_backward_reduce(s, dy, x, mean, invstd, sum_dy, sum_dy_xhat, dweight, dbias, accumulate);
    });
  }
  void batch_norm2d_backward_apply(const kernels::BatchNorm2dShape& s, const Tensor& dy, const Tensor& x,
                                   const Tensor& mean, const Tensor& invstd, const Tensor* weight, const Tensor* sum_dy,
                                   const Tensor* sum_dy_xhat, Tensor& dx) override {
    timed(times_, "batch_norm2d backward apply",
          [&] { inner_.batch_norm2d_backward_apply(s, dy, x, mean, invstd, weight, sum_dy, sum_dy_xhat, dx); });
  }
  void relu_forward(const Tensor& x, Tensor& y) override {
    timed(times_, "relu forward", [&] { inner_.relu_forward(x, y); });
  }
  void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    timed(times_, "relu backward", [&] { inner_.relu_backward(dy, y, dx); });
  }
  void avg_pool2d_forward(const kernels::Pool2dShape& s, bool count_include_pad, const Tensor& x,
                          Tensor& y) override {
    timed(times_, "avg_pool2d forward", [&] { inner_.avg_pool2d_forward(s, count_include_pad, x, y); });
  }
  void avg_pool2d_backward(const kernels::Pool2dShape& s, bool count_include_pad, const Tensor& dy,
                           Tensor& dx) override {
    timed(times_, "avg_pool2d backward", [&] { inner_.avg_pool2d_backward(s, count_include_pad, dy, dx); });
  }
  void global_avg_pool2d_forward(const Tensor& x, Tensor& y) override {
    timed(times_, "global_avg_pool2d forward", [&] { inner_.global_avg_pool2d_forward(x, y); });
  }
  void global_avg_pool2d_backward(const Tensor& dy, Tensor& dx) override {
    timed(times_, "global_avg_pool2d backward", [&] { inner_.global_avg_pool2d_backward(dy, dx); });
  }
  void log_softmax_forward(const Tensor& x, Tensor& y) override {
    timed(times_, "log_softmax forward", [&] { inner_.log_softmax_forward(x, y); });
  }
  void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    timed(times_, "log_softmax backward", [&] { inner_.log_softmax_backward(dy, y, dx); });
  }
  void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& loss_sum) override {
    timed(times_, "nll_loss forward", [&] { inner_.nll_loss_forward(logp, target, loss_sum); });
  }
  void nll_loss_backward(const Tensor& grad_per_row, const Tensor& target, Tensor& dlogp) override {
    timed(times_, "nll_loss backward", [&] { inner_.nll_loss_backward(grad_per_row, target, dlogp); });
  }
  void cross_entropy_forward_backward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                      const Tensor* divisor, Tensor& loss, Tensor& dlogits) override {
    timed(times_, "cross_entropy (fused loss)",
          [&] { inner_.cross_entropy_forward_backward(logits, target, ignore_index, divisor, loss, dlogits); });
  }
  void check_indices(const kernels::IndexCheck& check, const Tensor& indices) override {
    timed(times_, "check targets", [&] { inner_.check_indices(check, indices); });
  }
  void fill(Tensor& y, double value) override {
    timed(times_, "fill (zero grads, seeds)", [&] { inner_.fill(y, value); });
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    timed(times_, "add", [&] { inner_.add(a, b, y); });
  }
  void axpy(double alpha, const Tensor& x, Tensor& y) override {
    timed(times_, "axpy", [&] { inner_.axpy(alpha, x, y); });
  }
  void scale(double alpha, const Tensor& x, Tensor& y) override {
    timed(times_, "scale", [&] { inner_.scale(alpha, x, y); });
  }
  void unscale_and_check_finite(float inv_scale, Tensor& x, Tensor& found_inf) override {
    timed(times_, "unscale_and_check_finite", [&] { inner_.unscale_and_check_finite(inv_scale, x, found_inf); });
  }
  void scale_by(const Tensor& s, const Tensor& x, Tensor& y) override {
    timed(times_, "scale", [&] { inner_.scale_by(s, x, y); });
  }
  void sum(const Tensor& x, Tensor& out) override {
    timed(times_, "sum", [&] { inner_.sum(x, out); });
  }
  void sum_of_squares(const Tensor& x, Tensor& out) override {
    timed(times_, "sum_of_squares", [&] { inner_.sum_of_squares(x, out); });
  }
  void sgd_step(const kernels::SgdConfig& cfg, bool first_step, Tensor& param, const Tensor& grad,
                Tensor& momentum) override {
    timed(times_, "sgd", [&] { inner_.sgd_step(cfg, first_step, param, grad, momentum); });
  }
  void adam_step(const kernels::AdamConfig& cfg, int64_t step, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                 Tensor& exp_avg_sq, const Tensor& decay_mask) override {
    timed(times_, "adam", [&] { inner_.adam_step(cfg, step, param, grad, exp_avg, exp_avg_sq, decay_mask); });
  }
  // ---- gelu, tanh, dropout (issue 24) ----
  void gelu_forward(kernels::GeluApproximate form, const Tensor& x, Tensor& y) override {
    timed(times_, "gelu forward", [&] { inner_.gelu_forward(form, x, y); });
  }
  void gelu_backward(kernels::GeluApproximate form, const Tensor& dy, const Tensor& x, Tensor& dx) override {
    timed(times_, "gelu backward", [&] { inner_.gelu_backward(form, dy, x, dx); });
  }
  void tanh_forward(const Tensor& x, Tensor& y) override {
    timed(times_, "tanh forward", [&] { inner_.tanh_forward(x, y); });
  }
  void tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    timed(times_, "tanh backward", [&] { inner_.tanh_backward(dy, y, dx); });
  }
  void dropout(const kernels::DropoutConfig& cfg, const Tensor& x, Tensor& y) override {
    timed(times_, "dropout", [&] { inner_.dropout(cfg, x, y); });
  }
  // scaled_dot_product_attention
  void attention_forward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& key_mask, Tensor& o, Tensor& lse) override {
    timed(times_, "attention forward", [&] { inner_.attention_forward(s, q, k, v, key_mask, o, lse); });
  }
  void attention_backward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& key_mask, const Tensor& o, const Tensor& lse, const Tensor& dout, Tensor& dq,
                          Tensor& dk, Tensor& dv) override {
    timed(times_, "attention backward",
          [&] { inner_.attention_backward(s, q, k, v, key_mask, o, lse, dout, dq, dk, dv); });
  }
  // batched_matmul
  void batched_matmul(const kernels::BatchedMatmulShape& s, const Tensor& a, const Tensor& b, Tensor& c) override {
    timed(times_, "batched_matmul", [&] { inner_.batched_matmul(s, a, b, c); });
  }
  // embedding
  void embedding_forward(const Tensor& ids, const Tensor& weight, Tensor& y) override {
    timed(times_, "embedding forward", [&] { inner_.embedding_forward(ids, weight, y); });
  }
  void embedding_backward(const Tensor& ids, const Tensor& dy, int64_t padding_idx, Tensor& dweight,
                          bool accumulate) override {
    timed(times_, "embedding backward", [&] { inner_.embedding_backward(ids, dy, padding_idx, dweight, accumulate); });
  }
  // cross_entropy's count of tokens
  void count_targets(const Tensor& target, int64_t ignore_index, Tensor& counted) override {
    timed(times_, "count targets", [&] { inner_.count_targets(target, ignore_index, counted); });
  }
  // layer_norm
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                          Tensor& mean, Tensor& rstd) override {
    timed(times_, "layer_norm", [&] { inner_.layer_norm_forward(x, weight, bias, eps, y, mean, rstd); });
  }
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate) override {
    timed(times_, "layer_norm backward",
          [&] { inner_.layer_norm_backward(dy, x, weight, mean, rstd, dx, dweight, dbias, accumulate); });
  }
  // softmax
  void softmax_forward(const kernels::SoftmaxShape& s, const Tensor& x, const Tensor& mask, Tensor& y) override {
    timed(times_, "softmax", [&] { inner_.softmax_forward(s, x, mask, y); });
  }
  void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    timed(times_, "softmax backward", [&] { inner_.softmax_backward(dy, y, dx); });
  }
  // transpose
  void transpose(const kernels::TransposeShape& s, const Tensor& x, Tensor& y) override {
    timed(times_, "transpose", [&] { inner_.transpose(s, x, y); });
  }
  void cast(const Tensor& x, Tensor& y) override {
    timed(times_, "cast", [&] { inner_.cast(x, y); });
  }

 private:
  Backend& inner_;
  OpTimes times_;
  TimingAllocator allocator_;
};

}  // namespace dpcore::bench
