// Backend: the one interface through which every op reaches a kernel, with one
// implementation per device type (Caffe's CPU/GPU twin layers, PyTorch's dispatch, made
// small). engine/cpu_backend.cpp binds the reference CPU kernels; the CUDA backend
// (engine/cuda_backend.cu) binds the hand-written kernels and the cuDNN/cuBLAS
// engines. backend_for(device) is the ONLY place that chooses between them: ops never
// test for CUDA themselves.
//
// Ops (engine/ops/) validate shapes, dtypes and devices and allocate outputs before
// calling in here; a backend may assume its arguments are consistent. Output tensors are
// fully overwritten unless `accumulate` says otherwise (see kernels/cpu/kernels.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/tensor.h"
#include "kernels/adam_config.h"
#include "kernels/dropout_config.h"
#include "kernels/gelu_approximate.h"
#include "kernels/attention_shape.h"
#include "kernels/index_check.h"
#include "kernels/softmax_mask.h"
#include "kernels/transpose_shape.h"
#include "kernels/sgd_config.h"
#include "kernels/shapes.h"

namespace dpcore {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  // Number of usable devices of this type (CPU: 1; CUDA: 0 on a machine without a GPU).
  virtual int device_count() const = 0;
  virtual Allocator& allocator(int device_index) = 0;
  // Copies bytes between devices; either side may be the host. Ordered with the
  // backend's work on the current stream of that device.
  virtual void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) = 0;
  // Waits until all queued work on the device is done.
  virtual void synchronize(int device_index) = 0;
  // Waits until the work queued so far on the calling thread's current stream of the device
  // is done, not other streams' (a collective on another stream may wait for a peer that
  // hangs); raises what that work recorded as the device's error, as synchronize() does.
  // Nothing to wait for on the CPU, where work has run when the call that queued it returns.
  virtual void synchronize_stream(int device_index);
  // Backend-specific settings from the command line ("conv-engine" = "cudnn", "tf32" =
  // "on", ...). Fails naming the option when the backend has no such setting or value.
  virtual void set_option(const std::string& name, const std::string& value) = 0;

  // ---- execution: graphs, streams, events, host memory (the defaults are the CPU's answers) ----
  // Device work recorded once and replayed as one launch (a CUDA graph).
  class Captured {
   public:
    virtual ~Captured() = default;
    // Runs `body` eagerly on the stream that record() will capture on, and waits for it.
    // Libraries set up per-stream state (workspaces, kernels loaded lazily) on their first
    // call on a stream, which a capture forbids: a real step run here first does it.
    virtual void warm_up(const std::function<void()>& body) = 0;
    // Records, without running, the device work `body` queues. Once per graph. Throws a
    // dpcore::Error when the capture fails (the graph is then unusable).
    virtual void record(const std::function<void()>& body) = 0;
    virtual void replay() = 0;
    // True once a setting of the backend that the recording baked in (which conv and GEMM
    // engines run, TF32, whether graphs are on at all) has changed since: a replay would
    // silently keep the old one, so the caller records anew (or runs eagerly).
    virtual bool stale() const = 0;
  };
  // An empty graph to warm_up() and record() on the device; null when this backend cannot
  // capture or capturing is switched off (--cuda-graph off): the caller then runs eagerly.
  virtual std::unique_ptr<Captured> make_graph(int device_index);
  // From now on the calling thread queues its work on its own stream number `index` of the
  // device, so that replicas sharing one GPU run concurrently. Nothing to do on the CPU.
  virtual void use_thread_stream(int device_index, int index);
  // From now on the calling thread queues its work on a stream no other live thread is
  // given (a communication thread, whose kernels must not queue behind compute streams).
  virtual void use_own_stream(int device_index);

  // A point in the work queued on a stream, to order another stream after it without
  // waiting on the host.
  class Event {
   public:
    virtual ~Event() = default;
    // Blocks the calling thread until the work before the point has run.
    virtual void synchronize() = 0;
  };
  // A point after the work queued so far on the calling thread's current stream of the
  // device. Null on the CPU, where work has run when the call that queued it returns.
  virtual std::shared_ptr<Event> record_event(int device_index);
  // Work queued from now on on the calling thread's current stream of the device runs
  // after `event` (recorded on any stream of any device); null: nothing to wait for. The
  // CPU's work runs on the calling thread, so there it is a wait on the host.
  virtual void wait_event(int device_index, const std::shared_ptr<Event>& event);

  // Host memory the device copies from asynchronously (pinned); plain memory by default.
  virtual void* alloc_host(size_t bytes);
  virtual void free_host(void* ptr);
  // Blocks until every copy queued so far out of the alloc_host block holding `host` has
  // run, so that the caller may overwrite it (the loader, before refilling a batch buffer).
  // Nothing to wait for where copies complete before they return (the CPU).
  virtual void await_host_reads(const void* host);

  // ---- kernels ----
  virtual void conv2d_forward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) = 0;
  virtual void conv2d_backward_data(const kernels::Conv2dShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) = 0;
  virtual void conv2d_backward_weight(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                                      Tensor* dbias, bool accumulate) = 0;

  // conv2d with the relu fused into its epilogue: y = relu(conv(x, w) + bias), one pass over y.
  virtual void conv2d_relu_forward(const kernels::Conv2dShape& s, const Tensor& x, const Tensor& w, const Tensor* bias,
                                   Tensor& y) = 0;

  virtual void linear_forward(const kernels::LinearShape& s, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) = 0;
  virtual void linear_backward_data(const kernels::LinearShape& s, const Tensor& dy, const Tensor& w, Tensor& dx) = 0;
  virtual void linear_backward_weight(const kernels::LinearShape& s, const Tensor& x, const Tensor& dy, Tensor& dw,
                                      Tensor* dbias, bool accumulate) = 0;

  virtual void max_pool2d_forward(const kernels::Pool2dShape& s, const Tensor& x, Tensor& y, Tensor& argmax) = 0;
  virtual void max_pool2d_backward(const kernels::Pool2dShape& s, const Tensor& dy, const Tensor& argmax, Tensor& dx) = 0;
  // The pool's backward fused with the backward of the relu that produced its input:
  // dx = gather(dy) * (relu_y > 0), relu_y being the pool's input.
  virtual void max_pool2d_relu_backward(const kernels::Pool2dShape& s, const Tensor& dy, const Tensor& argmax,
                                        const Tensor& relu_y, Tensor& dx) = 0;

  // batch_norm2d in its steps (formulas in kernels/cpu/kernels.h): statistics, finalize
  // (invstd, running averages), apply; backward: per-channel sums, then dx. The pointers may
  // be null where the kernels allow it. A synchronised batch norm combines the replicas'
  // allgathered statistics, gathered [replicas * 3 * C] (count, mean, biased var per
  // replica, in rank order), into the group's mean[C] and var[C]; the group's count must be
  // positive. finalize and backward_apply then take s.group_count.
  virtual void batch_norm2d_stats(const kernels::BatchNorm2dShape& s, const Tensor& x, Tensor& mean, Tensor& var) = 0;
  virtual void batch_norm2d_combine_stats(const kernels::BatchNorm2dShape& s, int64_t replicas, const Tensor& gathered,
                                          Tensor& mean, Tensor& var) = 0;
  virtual void batch_norm2d_finalize(const kernels::BatchNorm2dShape& s, const Tensor& mean, const Tensor& var,
                                     double eps, double momentum, Tensor& invstd, Tensor* running_mean,
                                     Tensor* running_var) = 0;
  virtual void batch_norm2d_apply(const kernels::BatchNorm2dShape& s, const Tensor& x, const Tensor& mean,
                                  const Tensor& invstd, const Tensor* weight, const Tensor* bias, Tensor& y) = 0;
  virtual void batch_norm2d_backward_reduce(const kernels::BatchNorm2dShape& s, const Tensor& dy, const Tensor& x,
                                            const Tensor& mean, const Tensor& invstd, Tensor* sum_dy,
                                            Tensor* sum_dy_xhat, Tensor* dweight, Tensor* dbias, bool accumulate) = 0;
  virtual void batch_norm2d_backward_apply(const kernels::BatchNorm2dShape& s, const Tensor& dy, const Tensor& x,
                                           const Tensor& mean, const Tensor& invstd, const Tensor* weight,
                                           const Tensor* sum_dy, const Tensor* sum_dy_xhat, Tensor& dx) = 0;

  virtual void relu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void relu_backward(const Tensor& dy, const Tensor& y, Tensor& dx) = 0;

  // count_include_pad: every window divides by kernel_h * kernel_w (padding counts as
  // zeros, PyTorch's default), or by its real elements.
  virtual void avg_pool2d_forward(const kernels::Pool2dShape& s, bool count_include_pad, const Tensor& x,
                                  Tensor& y) = 0;
  virtual void avg_pool2d_backward(const kernels::Pool2dShape& s, bool count_include_pad, const Tensor& dy,
                                   Tensor& dx) = 0;
  // x[N,C,H,W] -> y[N,C,1,1], the mean of each plane; backward dx = dy / (H * W) over the plane.
  virtual void global_avg_pool2d_forward(const Tensor& x, Tensor& y) = 0;
  virtual void global_avg_pool2d_backward(const Tensor& dy, Tensor& dx) = 0;

  virtual void log_softmax_forward(const Tensor& x, Tensor& y) = 0;                     // over the last dim
  virtual void log_softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) = 0;
  // loss_sum: one element, sum over rows of -logp[n, target[n]].
  virtual void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& loss_sum) = 0;
  // dlogp = -grad_per_row * onehot(target); grad_per_row is a one-element tensor on the device
  // (so that a captured CUDA graph reads the current value instead of baking it in).
  virtual void nll_loss_backward(const Tensor& grad_per_row, const Tensor& target, Tensor& dlogp) = 0;
  // Fused log_softmax + NLL over the rows of logits [..., C], target [...]: a row whose
  // target is ignore_index adds no loss and gets a zero gradient; loss = the sum over the
  // other rows as above, dlogits = d(loss)/d(logits); both divided by divisor (an int64
  // scalar on the device: count_targets' count, for the mean) when it is given.
  virtual void cross_entropy_forward_backward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                              const Tensor* divisor, Tensor& loss, Tensor& dlogits) = 0;
  // Fails with a message naming check.op if an entry of the int64 `indices` lies outside
  // [0, check.limit) and is not check.ignore (kernels/index_check.h). The CUDA backend
  // checks without a sync and throws at the next wait for the device.
  virtual void check_indices(const kernels::IndexCheck& check, const Tensor& indices) = 0;

  virtual void fill(Tensor& y, double value) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y) = 0;          // y may alias a or b
  virtual void axpy(double alpha, const Tensor& x, Tensor& y) = 0;           // y += alpha * x
  virtual void scale(double alpha, const Tensor& x, Tensor& y) = 0;          // y = alpha * x, may alias
  // Multiplies y by a one-element device tensor: y = s[0] * x (may alias).
  virtual void scale_by(const Tensor& s, const Tensor& x, Tensor& y) = 0;
  virtual void sum(const Tensor& x, Tensor& out) = 0;                         // out: one element, fixed order
  virtual void sum_of_squares(const Tensor& x, Tensor& out) = 0;              // out: one element, sum's order
  // x *= inv_scale in place, in one pass that sets found_inf[0] (one element of x's dtype
  // and device) to 1 when an element of x was an Inf or NaN and leaves it as it was
  // otherwise: GradScaler's unscale (PyTorch's _amp_foreach_non_finite_check_and_unscale_).
  virtual void unscale_and_check_finite(float inv_scale, Tensor& x, Tensor& found_inf) = 0;

  // One fused update of a whole flat buffer; momentum is undefined when cfg.momentum == 0.
  virtual void sgd_step(const kernels::SgdConfig& cfg, bool first_step, Tensor& param, const Tensor& grad, Tensor& momentum) = 0;
  // One fused Adam/AdamW update of a whole flat buffer and its two moment buffers (same
  // layout); step is the number of this step, 1 for the first. decay_mask: int32 words of
  // one bit per element, weight decay where set (kernels/adam_config.h); undefined: everywhere.
  virtual void adam_step(const kernels::AdamConfig& cfg, int64_t step, Tensor& param, const Tensor& grad,
                         Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& decay_mask) = 0;

  // ---- gelu, tanh, dropout (issue 24) ----
  // gelu in either of PyTorch's forms; backward reads the forward INPUT x.
  virtual void gelu_forward(kernels::GeluApproximate form, const Tensor& x, Tensor& y) = 0;
  virtual void gelu_backward(kernels::GeluApproximate form, const Tensor& dy, const Tensor& x, Tensor& dx) = 0;
  // tanh; backward from the OUTPUT: dx = dy * (1 - y * y).
  virtual void tanh_forward(const Tensor& x, Tensor& y) = 0;
  virtual void tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx) = 0;
  // Inverted dropout of x [N, ...] (N samples, global indices cfg.first_sample ...):
  // y = x * (kept ? 1 / (1 - p) : 0), the mask of kernels/dropout_config.h. The backward is
  // the same call with dy for x.
  virtual void dropout(const kernels::DropoutConfig& cfg, const Tensor& x, Tensor& y) = 0;
  // ---- scaled_dot_product_attention (kernels/attention_shape.h) ----
  // o = softmax(q k^T * scale + mask) v and lse, one log-sum-exp per query row; key_mask
  // [B, Tk] of q's dtype (nonzero = attend) or undefined. The backward recomputes the
  // probabilities from q, k and lse and overwrites dq, dk, dv.
  virtual void attention_forward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& key_mask, Tensor& o, Tensor& lse) = 0;
  virtual void attention_backward(const kernels::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& key_mask, const Tensor& o, const Tensor& lse, const Tensor& dout,
                                  Tensor& dq, Tensor& dk, Tensor& dv) = 0;
  // ---- batched_matmul: c[i] = op(a[i]) * op(b[i]) over s.batch contiguous matrix pairs
  // (kernels/shapes.h); on CUDA through the GEMM engine (--gemm-engine) ----
  virtual void batched_matmul(const kernels::BatchedMatmulShape& s, const Tensor& a, const Tensor& b, Tensor& c) = 0;
  // embedding: y[..., D] = weight[ids[...]] for a [V, D] table (ids checked beforehand by
  // check_indices). The backward writes (accumulate: adds) dweight[v] = the sum of dy over
  // the positions whose id is v, in increasing position order on every backend and thread
  // count; 0 for rows no id names and for row padding_idx (-1: none).
  virtual void embedding_forward(const Tensor& ids, const Tensor& weight, Tensor& y) = 0;
  virtual void embedding_backward(const Tensor& ids, const Tensor& dy, int64_t padding_idx, Tensor& dweight,
                                  bool accumulate) = 0;

  // cross_entropy's count of tokens: counted (an int64 scalar) = the number of entries of
  // target that are not ignore_index, computed on the device without a sync.
  virtual void count_targets(const Tensor& target, int64_t ignore_index, Tensor& counted) = 0;
  // layer_norm over the last dimension of x (rows = numel / cols), weight and bias [cols]
  // or both undefined; mean and rstd [rows] are saved for the backward (kernels/cpu/kernels.h
  // has the formulas). Backward: dx, dweight, dbias undefined when not wanted; accumulate
  // adds onto dweight and dbias.
  virtual void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                                  Tensor& mean, Tensor& rstd) = 0;
  virtual void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd, Tensor& dx, Tensor& dweight, Tensor& dbias, bool accumulate) = 0;
  // softmax(x + mask) over the last dimension; mask undefined or broadcast as s says, causal
  // in s (kernels/softmax_mask.h). Backward from the output y.
  virtual void softmax_forward(const kernels::SoftmaxShape& s, const Tensor& x, const Tensor& mask, Tensor& y) = 0;
  virtual void softmax_backward(const Tensor& dy, const Tensor& y, Tensor& dx) = 0;
  // ---- cast (issue 27): y = x converted, float32 to bfloat16 or float16 rounded to nearest
  // even (kernels/half_types.h), or either back to float32 exactly; same element count.
  // One pass over the array: the low-precision copy of the flat parameters is one call.
  virtual void cast(const Tensor& x, Tensor& y) = 0;
  // ---- transpose: y [outer, B, mid, A, inner] from x [outer, A, mid, B, inner] ----
  virtual void transpose(const kernels::TransposeShape& s, const Tensor& x, Tensor& y) = 0;
};

// The backend for a device. Throws a clear error if that device type is not compiled in or
// the device index does not exist.
Backend& backend_for(Device device);
// Backend registration, done once per device type by a static object in the backend's file.
void register_backend(Device::Type type, Backend* backend);
// The registered backend for a type, or null (used to probe for CUDA without failing).
Backend* find_backend(Device::Type type);

}  // namespace dpcore
