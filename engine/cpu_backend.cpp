// The CPU backend: binds the reference kernels of kernels/cpu to the Backend interface,
// choosing the float or double instantiation from the tensors' dtype.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/stored_values.h"
#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/kernels.h"

namespace dpcore {
namespace {

namespace k = kernels::cpu;

// 64-byte aligned host memory (a cache line; also what AVX-512 loads like).
//
// Blocks of kCachedFrom bytes or more are not given back when freed but kept, by size, and
// handed out again for the same size: a training step allocates the same activation sizes
// at every step, and glibc returns such large blocks to the kernel, which then faults them
// in again, zero-filled, page by page at the next step (5% of a resnet8 step on the CPU).
// The cache holds at most as many bytes as were ever in use at once (the peak), so a
// process takes at most twice its peak; beyond that, freed blocks go back to glibc (a run
// with several batch sizes, the last short batch and evaluation's, would otherwise keep a
// set of blocks for each). bytes_in_use counts blocks handed out only. Under
// AddressSanitizer nothing is cached, so that a use after free is still caught.
class CpuAllocator : public Allocator {
 public:
#ifdef DPCORE_SANITIZE_ADDRESS
  static constexpr size_t kCachedFrom = SIZE_MAX;
#else
  static constexpr size_t kCachedFrom = size_t(1) << 20;
#endif

  ~CpuAllocator() override {
    for (auto& [bytes, blocks] : cache_)
      for (void* p : blocks) std::free(p);
  }
  void* allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = rounded >= kCachedFrom ? take_cached(rounded) : nullptr;
    if (!p) p = std::aligned_alloc(64, rounded);
    if (!p) fail("cpu allocator: out of memory allocating ", bytes, " bytes");
    size_t now = in_use_ += bytes;
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    return p;
  }
  void deallocate(void* ptr, size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    in_use_ -= bytes;
    if (rounded >= kCachedFrom) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_bytes_ + rounded <= peak_) {
        cache_[rounded].push_back(ptr);
        cached_bytes_ += rounded;
        return;
      }
    }
    std::free(ptr);
  }
  size_t bytes_in_use() const override { return in_use_; }
  size_t peak_bytes() const override { return peak_; }
  void reset_peak() override { peak_ = in_use_.load(); }

 private:
  void* take_cached(size_t rounded) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(rounded);
    if (it == cache_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= rounded;
    return p;
  }

  std::atomic<size_t> in_use_{0}, peak_{0};
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> cache_;  // free blocks by rounded size
  size_t cached_bytes_ = 0;                                 // in cache_; guarded by mutex_
};

// Calls f(T{}) with T = float or double according to the tensor's dtype.
template <class F>
void dispatch_float(const char* op, const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::Float32: f(float{}); return;
    case DType::Float64: f(double{}); return;
    default: fail(op, ": expected a float32 or float64 tensor, got ", t.str());
  }
}

// An elementwise op on 16-bit tensors: every operand of the first one's dtype.
void check_same_dtype(const char* op, const Tensor& first, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others)
    DPCORE_CHECK(t->dtype() == first.dtype(), op, ": ", t->str(), " is not of ", first.str(), "'s dtype");
}

// dispatch_float and the 16-bit types: the matrix products (linear, batched_matmul, conv2d),
// attention and the ops with native 16-bit kernels (add, scale, relu, gelu, tanh, dropout,
// max and average pooling, batch norm's passes).
template <class F>
void dispatch_float_or_half(const char* op, const Tensor& t, F&& f) {
  switch (t.dtype()) {
    case DType::BFloat16: f(kernels::BFloat16{}); return;
    case DType::Float16: f(kernels::Float16{}); return;
    default: dispatch_float(op, t, f);
  }
}

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* ptr(const Tensor* t) {
  return t ? ptr<T>(*t) : nullptr;
}

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  int device_count() const override { return 1; }
  Allocator& allocator(int) override { return allocator_; }
  void copy_bytes(void* dst, Device, const void* src, Device, size_t bytes) override { std::memmove(dst, src, bytes); }
  void synchronize(int) override {}
  // "bf16-gemm" = "amx-bf16" | "avx512-bf16" | "convert" | "auto": which path bfloat16
  // matrix products take (kernels/cpu/half/gemm_half.h); auto: the first of AMX and
  // AVX512-BF16 the CPU has.
  void set_option(const std::string& name, const std::string& value) override {
    DPCORE_CHECK(name == "bf16-gemm", "the cpu backend has no option '", name, "' (it has bf16-gemm)");
    if (value == "convert") k::set_half_gemm_path(k::HalfGemmPath::Convert);
    else if (value == "avx512-bf16") k::set_half_gemm_path(k::HalfGemmPath::Avx512Bf16);
    else if (value == "amx-bf16") k::set_half_gemm_path(k::HalfGemmPath::AmxBf16);
    else if (value == "auto")
      k::set_half_gemm_path(k::cpu_has_amx_bf16()      ? k::HalfGemmPath::AmxBf16
                            : k::cpu_has_avx512_bf16() ? k::HalfGemmPath::Avx512Bf16
                                                       : k::HalfGemmPath::Convert);
    else fail("the cpu backend's bf16-gemm is amx-bf16, avx512-bf16, convert or auto, not '", value, "'");
  }

  void conv2d_forward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                      Tensor& y) override {
    dispatch_float_or_half("conv2d", x, [&](auto t) {
      using T = decltype(t);
      k::conv2d_forward<T>(s, ptr<T>(x), ptr<T>(w), ptr<T>(bias), ptr<T>(y));
    });
  }
  // Bit for bit conv2d_forward then relu_forward in place, in one pass over y.
  void conv2d_relu_forward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                           Tensor& y) override {
    dispatch_float("conv2d", x, [&](auto t) {
      using T = decltype(t);
      k::conv2d_relu_forward<T>(s, ptr<T>(x), ptr<T>(w), ptr<T>(bias), ptr<T>(y));
    });
  }
  void conv2d_backward_data(const kernels::Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) override {
    dispatch_float_or_half("conv2d backward", dy, [&](auto t) {
      using T = decltype(t);
      k::conv2d_backward_data<T>(s, ptr<T>(dy), ptr<T>(w), ptr<T>(dx));
    });
  }
  void conv2d_backward_weight(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                              Tensor* dbias, bool accumulate) override {
    dispatch_float_or_half("conv2d backward", x, [&](auto t) {
      using T = decltype(t);
      k::conv2d_backward_weight<T>(s, ptr<T>(x), ptr<T>(dy), ptr<T>(dw), ptr<T>(dbias), accumulate);
    });
  }

  void linear_forward(const kernels::LinearShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                      Tensor& y) override {
    dispatch_float_or_half("linear", x, [&](auto t) {
      using T = decltype(t);
      k::linear_forward<T>(s, ptr<T>(x), ptr<T>(w), ptr<T>(bias), ptr<T>(y));
    });
  }
  void linear_backward_data(const kernels::LinearShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) override {
    dispatch_float_or_half("linear backward", dy, [&](auto t) {
      using T = decltype(t);
      k::linear_backward_data<T>(s, ptr<T>(dy), ptr<T>(w), ptr<T>(dx));
    });
  }
  void linear_backward_weight(const kernels::LinearShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                              Tensor* dbias, bool accumulate) override {
    dispatch_float_or_half("linear backward", x, [&](auto t) {
      using T = decltype(t);
      k::linear_backward_weight<T>(s, ptr<T>(x), ptr<T>(dy), ptr<T>(dw), ptr<T>(dbias), accumulate);
    });
  }

  // 16-bit natively: the maximum is exact, the backward's sums float32 (kernels/cpu/max_pool2d.cpp).
  void max_pool2d_forward(const kernels::Pool2dShape& s, const Tensor& x, Tensor& y, Tensor& argmax) override {
    check_same_dtype("max_pool2d", x, {&y});
    dispatch_float_or_half("max_pool2d", x, [&](auto t) {
      using T = decltype(t);
      k::max_pool2d_forward<T>(s, ptr<T>(x), ptr<T>(y), argmax.data<int32_t>());
    });
  }
  void max_pool2d_backward(const kernels::Pool2dShape& s, const Tensor& dy, const Tensor& argmax, Tensor& dx) override {
    check_same_dtype("max_pool2d backward", dy, {&dx});
    dispatch_float_or_half("max_pool2d backward", dy, [&](auto t) {
      using T = decltype(t);
      k::max_pool2d_backward<T>(s, ptr<T>(dy), argmax.data<int32_t>(), ptr<T>(dx));
    });
  }

  // Bit for bit max_pool2d_backward then relu_backward in place, in one pass over dx.
  void max_pool2d_relu_backward(const kernels::Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                                const Tensor& relu_y, Tensor& dx) override {
    dispatch_float("max_pool2d backward", dy, [&](auto t) {
      using T = decltype(t);
      k::max_pool2d_relu_backward<T>(s, ptr<T>(dy), argmax.data<int32_t>(), ptr<T>(relu_y), ptr<T>(dx));
    });
  }

  // The steps over activations take 16-bit x, y, dy, dx beside float32 statistics (the op
  // checks those; S = computed_t<X>), widened in registers (kernels/cpu/batch_norm2d.cpp).
  void batch_norm2d_stats(const kernels::BatchNorm2dShape& s, const Tensor& x, Tensor& mean, Tensor& var) override {
    dispatch_float_or_half("batch_norm2d", x, [&](auto t) {
      using X = decltype(t);
      using S = k::computed_t<X>;
      k::batch_norm2d_stats<X, S>(s, ptr<X>(x), ptr<S>(mean), ptr<S>(var));
    });
  }
  void batch_norm2d_combine_stats(const kernels::BatchNorm2dShape& s, int64_t replicas, const Tensor& gathered,
                                  Tensor& mean, Tensor& var) override {
    dispatch_float("batch_norm2d combine_stats", gathered, [&](auto t) {
      using T = decltype(t);
      k::batch_norm2d_combine_stats<T>(s, replicas, ptr<T>(gathered), ptr<T>(mean), ptr<T>(var));
    });
  }
  void batch_norm2d_finalize(const kernels::BatchNorm2dShape& s, const Tensor& mean, const Tensor& var, double eps,
                             double momentum, Tensor& invstd, Tensor* running_mean, Tensor* running_var) override {
    dispatch_float("batch_norm2d", mean, [&](auto t) {
      using T = decltype(t);
      k::batch_norm2d_finalize<T>(s, ptr<T>(mean), ptr<T>(var), eps, momentum, ptr<T>(invstd), ptr<T>(running_mean),
                                  ptr<T>(running_var));
    });
  }
  void batch_norm2d_apply(const kernels::BatchNorm2dShape& s, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                          const Tensor* weight, const Tensor* bias, Tensor& y) override {
    check_same_dtype("batch_norm2d", x, {&y});
    dispatch_float_or_half("batch_norm2d", x, [&](auto t) {
      using X = decltype(t);
      using S = k::computed_t<X>;
      k::batch_norm2d_apply<X, S>(s, ptr<X>(x), ptr<S>(mean), ptr<S>(invstd), ptr<S>(weight), ptr<S>(bias),
                                  ptr<X>(y));
    });
  }
  void batch_norm2d_backward_reduce(const kernels::BatchNorm2dShape& s, const Tensor& dy, const Tensor& x,
                                    const Tensor& mean, const Tensor& invstd, Tensor* sum_dy, Tensor* sum_dy_xhat,
                                    Tensor* dweight, Tensor* dbias, bool accumulate) override {
    check_same_dtype("batch_norm2d backward", dy, {&x});
    dispatch_float_or_half("batch_norm2d backward", dy, [&](auto t) {
      using X = decltype(t);
      using S = k::computed_t<X>;
      k::batch_norm2d_backward_reduce<X, S>(s, ptr<X>(dy), ptr<X>(x), ptr<S>(mean), ptr<S>(invstd), ptr<S>(sum_dy),
                                            ptr<S>(sum_dy_xhat), ptr<S>(dweight), ptr<S>(dbias), accumulate);
    });
  }
  void batch_norm2d_backward_apply(const kernels::BatchNorm2dShape& s, const Tensor& dy, const Tensor& x,
                                   const Tensor& mean, const Tensor& invstd, const Tensor* weight, const Tensor* sum_dy,
                                   const Tensor* sum_dy_xhat, Tensor& dx) override {
    check_same_dtype("batch_norm2d backward", dy, {&x, &dx});
    dispatch_float_or_half("batch_norm2d backward", dy, [&](auto t) {
      using X = decltype(t);
      using S = k::computed_t<X>;
      k::batch_norm2d_backward_apply<X, S>(s, ptr<X>(dy), ptr<X>(x), ptr<S>(mean), ptr<S>(invstd), ptr<S>(weight),
                                           ptr<S>(sum_dy), ptr<S>(sum_dy_xhat), ptr<X>(dx));
    });
  }

  // 16-bit natively (relu commutes with rounding: kernels/cpu/half/relu_half.cpp).
  void relu_forward(const Tensor& x, Tensor& y) override {
    dispatch_float_or_half("relu", x, [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_same_v<T, kernels::BFloat16> || std::is_same_v<T, kernels::Float16>) {
        check_same_dtype("relu", x, {&y});
        k::relu_forward_half<T>(x.numel(), ptr<T>(x), ptr<T>(y));
      } else
        k::relu_forward<T>(x.numel(), ptr<T>(x), ptr<T>(y));
    });
  }
  void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    dispatch_float_or_half("relu backward", dy, [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_same_v<T, kernels::BFloat16> || std::is_same_v<T, kernels::Float16>) {
        check_same_dtype("relu backward", dy, {&y, &dx});
        k::relu_backward_half<T>(dy.numel(), ptr<T>(dy), ptr<T>(y), ptr<T>(dx));
      } else
        k::relu_backward<T>(dy.numel(), ptr<T>(dy), ptr<T>(y), ptr<T>(dx));
    });
  }

  void avg_pool2d_forward(const kernels::Pool2dShape& s, bool count_include_pad, const Tensor& x,
                          Tensor& y) override {
    check_same_dtype("avg_pool2d", x, {&y});
    dispatch_float_or_half("avg_pool2d", x, [&](auto t) {
      using T = decltype(t);
      k::avg_pool2d_forward<T>(s, count_include_pad, ptr<T>(x), ptr<T>(y));
    });
  }
  void avg_pool2d_backward(const kernels::Pool2dShape& s, bool count_include_pad, const Tensor& dy,
                           Tensor& dx) override {
    check_same_dtype("avg_pool2d backward", dy, {&dx});
    dispatch_float_or_half("avg_pool2d backward", dy, [&](auto t) {
      using T = decltype(t);
      k::avg_pool2d_backward<T>(s, count_include_pad, ptr<T>(dy), ptr<T>(dx));
    });
  }
  void global_avg_pool2d_forward(const Tensor& x, Tensor& y) override {
    check_same_dtype("global_avg_pool2d", x, {&y});
    dispatch_float_or_half("global_avg_pool2d", x, [&](auto t) {
      using T = decltype(t);
      k::global_avg_pool2d_forward<T>(x.size(0) * x.size(1), x.size(2) * x.size(3), ptr<T>(x), ptr<T>(y));
    });
  }
  void global_avg_pool2d_backward(const Tensor& dy, Tensor& dx) override {
    check_same_dtype("global_avg_pool2d backward", dy, {&dx});
    dispatch_float_or_half("global_avg_pool2d backward", dy, [&](auto t) {
      using T = decltype(t);
      k::global_avg_pool2d_backward<T>(dx.size(0) * dx.size(1), dx.size(2) * dx.size(3), ptr<T>(dy), ptr<T>(dx));
    });
  }

  void log_softmax_forward(const Tensor& x, Tensor& y) override {
    dispatch_float("log_softmax", x, [&](auto t) {
      using T = decltype(t);
      k::log_softmax_forward<T>(x.size(0), x.size(1), ptr<T>(x), ptr<T>(y));
    });
  }
  void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    dispatch_float("log_softmax backward", dy, [&](auto t) {
      using T = decltype(t);
      k::log_softmax_backward<T>(dy.size(0), dy.size(1), ptr<T>(dy), ptr<T>(y), ptr<T>(dx));
    });
  }
  void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& loss_sum) override {
    dispatch_float("nll_loss", logp, [&](auto t) {
      using T = decltype(t);
      k::nll_loss_forward<T>(logp.size(0), logp.size(1), ptr<T>(logp), target.data<int64_t>(), ptr<T>(loss_sum));
    });
  }
  void nll_loss_backward(const Tensor& grad_per_row, const Tensor& target, Tensor& dlogp) override {
    dispatch_float("nll_loss backward", dlogp, [&](auto t) {
      using T = decltype(t);
      k::nll_loss_backward<T>(dlogp.size(0), dlogp.size(1), ptr<T>(grad_per_row)[0], target.data<int64_t>(),
                              ptr<T>(dlogp));
    });
  }
  void cross_entropy_forward_backward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                      const Tensor* divisor, Tensor& loss, Tensor& dlogits) override {
    dispatch_float("cross_entropy", logits, [&](auto t) {
      using T = decltype(t);
      k::cross_entropy_forward_backward<T>(target.numel(), logits.size(-1), ptr<T>(logits), target.data<int64_t>(),
                                           ignore_index, T(1), divisor ? divisor->data<int64_t>() : nullptr,
                                           ptr<T>(loss), ptr<T>(dlogits));
    });
  }
  void check_indices(const kernels::IndexCheck& check, const Tensor& indices) override {
    const int64_t* t = indices.data<int64_t>();
    for (int64_t i = 0; i < indices.numel(); ++i) {
      if (!kernels::index_passes(check, t[i])) kernels::fail_index(check, i, t[i]);
    }
  }

  void fill(Tensor& y, double value) override {
    switch (y.dtype()) {
      case DType::Float32: k::fill<float>(y.numel(), float(value), y.data<float>()); return;
      case DType::Float64: k::fill<double>(y.numel(), value, y.data<double>()); return;
      case DType::Int32: std::fill_n(y.data<int32_t>(), y.numel(), int32_t(value)); return;
      case DType::Int64: std::fill_n(y.data<int64_t>(), y.numel(), int64_t(value)); return;
      // Through float32, as PyTorch converts a double scalar to its 16-bit types.
      case DType::BFloat16:
        std::fill_n(y.data<kernels::BFloat16>(), y.numel(), kernels::float_to_bfloat16(float(value)));
        return;
      case DType::Float16:
        std::fill_n(y.data<kernels::Float16>(), y.numel(), kernels::float_to_float16(float(value)));
        return;
    }
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override {
    // 16-bit: the sum rounded once from float32 (the reduction step of a 16-bit allreduce).
    dispatch_float_or_half("add", a, [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_same_v<T, kernels::BFloat16> || std::is_same_v<T, kernels::Float16>) {
        check_same_dtype("add", a, {&b, &y});
        k::add_half<T>(a.numel(), ptr<T>(a), ptr<T>(b), ptr<T>(y));
      } else
        k::add<T>(a.numel(), ptr<T>(a), ptr<T>(b), ptr<T>(y));
    });
  }
  void axpy(double alpha, const Tensor& x, Tensor& y) override {
    dispatch_float("axpy", x, [&](auto t) {
      using T = decltype(t);
      k::axpy<T>(x.numel(), T(alpha), ptr<T>(x), ptr<T>(y));
    });
  }
  void scale(double alpha, const Tensor& x, Tensor& y) override {
    check_same_dtype("scale", x, {&y});
    dispatch_float_or_half("scale", x, [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_same_v<T, kernels::BFloat16> || std::is_same_v<T, kernels::Float16>)
        k::scale_half<T>(x.numel(), float(alpha), ptr<T>(x), ptr<T>(y));
      else
        k::scale<T>(x.numel(), T(alpha), ptr<T>(x), ptr<T>(y));
    });
  }
  void unscale_and_check_finite(float inv_scale, Tensor& x, Tensor& found_inf) override {
    check_same_device_dtype("unscale_and_check_finite", x, found_inf);
    dispatch_float("unscale_and_check_finite", x, [&](auto t) {
      using T = decltype(t);
      k::unscale_and_check_finite<T>(x.numel(), T(inv_scale), ptr<T>(x), ptr<T>(found_inf));
    });
  }
  void scale_by(const Tensor& s, const Tensor& x, Tensor& y) override {
    dispatch_float("scale", x, [&](auto t) {
      using T = decltype(t);
      k::scale<T>(x.numel(), ptr<T>(s)[0], ptr<T>(x), ptr<T>(y));
    });
  }
  void sum(const Tensor& x, Tensor& out) override {
    dispatch_float("sum", x, [&](auto t) {
      using T = decltype(t);
      k::sum<T>(x.numel(), ptr<T>(x), ptr<T>(out));
    });
  }
  void sum_of_squares(const Tensor& x, Tensor& out) override {
    dispatch_float("sum_of_squares", x, [&](auto t) {
      using T = decltype(t);
      k::sum_of_squares<T>(x.numel(), ptr<T>(x), ptr<T>(out));
    });
  }
  void sgd_step(const kernels::SgdConfig& cfg, bool first_step, Tensor& param, const Tensor& grad,
                Tensor& momentum) override {
    dispatch_float("sgd", param, [&](auto t) {
      using T = decltype(t);
      k::sgd_step<T>(param.numel(), cfg, first_step, ptr<T>(param), ptr<T>(grad), ptr<T>(momentum));
    });
  }
  void adam_step(const kernels::AdamConfig& cfg, int64_t step, Tensor& param, const Tensor& grad, Tensor& exp_avg,
                 Tensor& exp_avg_sq, const Tensor& decay_mask) override {
    const auto* mask = reinterpret_cast<const uint32_t*>(ptr<int32_t>(decay_mask));
    dispatch_float("adam", param, [&](auto t) {
      using T = decltype(t);
      k::adam_step<T>(param.numel(), cfg, step, ptr<T>(param), ptr<T>(grad), ptr<T>(exp_avg), ptr<T>(exp_avg_sq),
                      mask);
    });
  }
  // ---- scaled_dot_product_attention ----
  void attention_forward(const kernels::AttentionShape& s, const Tensor& query, const Tensor& key, const Tensor& value,
                         const Tensor& key_mask, Tensor& o, Tensor& lse) override {
    dispatch_float_or_half("scaled_dot_product_attention", query, [&](auto t) {
      using T = decltype(t);
      k::attention_forward<T>(s, ptr<T>(query), ptr<T>(key), ptr<T>(value), ptr<T>(key_mask), ptr<T>(o),
                              ptr<kernels::statistic_t<T>>(lse));
    });
  }
  void attention_backward(const kernels::AttentionShape& s, const Tensor& query, const Tensor& key, const Tensor& value,
                          const Tensor& key_mask, const Tensor& o, const Tensor& lse, const Tensor& dout, Tensor& dq,
                          Tensor& dk, Tensor& dv) override {
    Tensor row_dot = Tensor::empty({s.rows()}, DType::Float64, query.device());  // D = rowsum(dout * o), O(T)
    dispatch_float_or_half("scaled_dot_product_attention backward", query, [&](auto t) {
      using T = decltype(t);
      k::attention_backward<T>(s, ptr<T>(query), ptr<T>(key), ptr<T>(value), ptr<T>(key_mask), ptr<T>(o),
                               ptr<kernels::statistic_t<T>>(lse), ptr<T>(dout), ptr<double>(row_dot), ptr<T>(dq),
                               ptr<T>(dk), ptr<T>(dv));
    });
  }

  // ---- gelu, tanh, dropout (issue 24), 16-bit natively ----
  void gelu_forward(kernels::GeluApproximate form, const Tensor& x, Tensor& y) override {
    check_same_dtype("gelu", x, {&y});
    dispatch_float_or_half("gelu", x, [&](auto t) {
      using T = decltype(t);
      k::gelu_forward<T>(form, x.numel(), ptr<T>(x), ptr<T>(y));
    });
  }
  void gelu_backward(kernels::GeluApproximate form, const Tensor& dy, const Tensor& x, Tensor& dx) override {
    check_same_dtype("gelu backward", dy, {&x, &dx});
    dispatch_float_or_half("gelu backward", dy, [&](auto t) {
      using T = decltype(t);
      k::gelu_backward<T>(form, dy.numel(), ptr<T>(dy), ptr<T>(x), ptr<T>(dx));
    });
  }
  void tanh_forward(const Tensor& x, Tensor& y) override {
    check_same_dtype("tanh", x, {&y});
    dispatch_float_or_half("tanh", x, [&](auto t) {
      using T = decltype(t);
      k::tanh_forward<T>(x.numel(), ptr<T>(x), ptr<T>(y));
    });
  }
  void tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    check_same_dtype("tanh backward", dy, {&y, &dx});
    dispatch_float_or_half("tanh backward", dy, [&](auto t) {
      using T = decltype(t);
      k::tanh_backward<T>(dy.numel(), ptr<T>(dy), ptr<T>(y), ptr<T>(dx));
    });
  }
  // 16-bit natively (kernels/cpu/dropout.cpp).
  void dropout(const kernels::DropoutConfig& cfg, const Tensor& x, Tensor& y) override {
    const int64_t samples = x.size(0), sample_size = samples ? x.numel() / samples : 0;
    check_same_dtype("dropout", x, {&y});
    dispatch_float_or_half("dropout", x, [&](auto t) {
      using T = decltype(t);
      k::dropout<T>(cfg, samples, sample_size, ptr<T>(x), ptr<T>(y));
    });
  }

  // ---- batched_matmul ----
  void batched_matmul(const kernels::BatchedMatmulShape& s, const Tensor& a, const Tensor& b, Tensor& c) override {
    dispatch_float_or_half("batched_matmul", a, [&](auto t) {
      using T = decltype(t);
      k::batched_matmul<T>(s, ptr<T>(a), ptr<T>(b), ptr<T>(c));
    });
  }

  // embedding
  void embedding_forward(const Tensor& ids, const Tensor& weight, Tensor& y) override {
    dispatch_float("embedding", weight, [&](auto t) {
      using T = decltype(t);
      k::embedding_forward<T>(ids.numel(), weight.size(1), ids.data<int64_t>(), ptr<T>(weight), ptr<T>(y));
    });
  }
  void embedding_backward(const Tensor& ids, const Tensor& dy, int64_t padding_idx, Tensor& dweight,
                          bool accumulate) override {
    dispatch_float("embedding backward", dweight, [&](auto t) {
      using T = decltype(t);
      k::embedding_backward<T>(ids.numel(), dweight.size(0), dweight.size(1), ids.data<int64_t>(), ptr<T>(dy),
                               padding_idx, ptr<T>(dweight), accumulate);
    });
  }

  // cross_entropy's count of tokens
  void count_targets(const Tensor& target, int64_t ignore_index, Tensor& counted) override {
    k::count_targets(target.numel(), target.data<int64_t>(), ignore_index, counted.data<int64_t>());
  }
  // layer_norm
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                          Tensor& mean, Tensor& rstd) override {
    check_same_dtype("layer_norm", x, {&y});
    dispatch_float_or_half("layer_norm", x, [&](auto t) {
      using T = decltype(t);
      using S = k::computed_t<T>;
      const int64_t cols = x.size(x.dim() - 1);
      k::layer_norm_forward<T, S>(x.numel() / cols, cols, ptr<T>(x), ptr<S>(weight), ptr<S>(bias), eps, ptr<T>(y),
                                  ptr<S>(mean), ptr<S>(rstd));
    });
  }
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate) override {
    check_same_dtype("layer_norm backward", x, {&dy});
    if (dx.defined()) check_same_dtype("layer_norm backward", x, {&dx});
    dispatch_float_or_half("layer_norm backward", x, [&](auto t) {
      using T = decltype(t);
      using S = k::computed_t<T>;
      const int64_t cols = x.size(x.dim() - 1);
      k::layer_norm_backward<T, S>(x.numel() / cols, cols, ptr<T>(dy), ptr<T>(x), ptr<S>(weight), ptr<S>(mean),
                                   ptr<S>(rstd), ptr<T>(dx), ptr<S>(dweight), ptr<S>(dbias), accumulate);
    });
  }
  // softmax
  void softmax_forward(const kernels::SoftmaxShape& s, const Tensor& x, const Tensor& mask, Tensor& y) override {
    dispatch_float("softmax", x, [&](auto t) {
      using T = decltype(t);
      k::softmax_forward<T>(s, ptr<T>(x), ptr<T>(mask), ptr<T>(y));
    });
  }
  void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) override {
    dispatch_float("softmax backward", y, [&](auto t) {
      using T = decltype(t);
      const int64_t cols = y.size(y.dim() - 1);
      k::softmax_backward<T>(y.numel() / cols, cols, ptr<T>(dy), ptr<T>(y), ptr<T>(dx));
    });
  }
  // ---- transpose ----
  void cast(const Tensor& x, Tensor& y) override {
    const DType from = x.dtype(), to = y.dtype();
    const int64_t n = x.numel();
    if (from == DType::Float32 && to == DType::BFloat16) k::cast(n, ptr<float>(x), ptr<kernels::BFloat16>(y));
    else if (from == DType::Float32 && to == DType::Float16) k::cast(n, ptr<float>(x), ptr<kernels::Float16>(y));
    else if (from == DType::BFloat16 && to == DType::Float32) k::cast(n, ptr<kernels::BFloat16>(x), ptr<float>(y));
    else if (from == DType::Float16 && to == DType::Float32) k::cast(n, ptr<kernels::Float16>(x), ptr<float>(y));
    else fail("cast: ", dtype_name(from), " to ", dtype_name(to), " is not a conversion the kernels have");
  }
  void transpose(const kernels::TransposeShape& s, const Tensor& x, Tensor& y) override {
    dispatch_float_or_half("transpose", x, [&](auto t) {
      using T = decltype(t);
      k::transpose<T>(s, ptr<T>(x), ptr<T>(y));
    });
  }

 private:
  CpuAllocator allocator_;
};

CpuBackend cpu_backend;
const bool registered = (register_backend(Device::Type::CPU, &cpu_backend), true);

}  // namespace
}  // namespace dpcore

namespace dpcore::runtime {
void use_native_blas_kernels(char** argv) {
  const std::string core = kernels::cpu::better_blas_core();
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv("/proc/self/exe", argv);
}

std::string blas_description() { return "OpenBLAS " + kernels::cpu::blas_core(); }

void set_cpu_threads(int threads) { kernels::cpu::set_num_threads(threads); }
int cpu_threads() { return kernels::cpu::num_threads(); }
}  // namespace dpcore::runtime
