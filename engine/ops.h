// The differentiable operations. Each checks its inputs (failing with a message that names
// the op and the shapes), allocates its output on the input's device, calls the device's
// backend (engine/backend.h), and records a backward node when a gradient is needed.
#pragma once

#include <cstdint>
#include <string>
#include <optional>

#include "engine/tensor.h"
#include "kernels/index_check.h"

namespace dpcore::ops {

struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
};
struct Pool2dOptions {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
};
enum class Reduction { Mean, Sum };

// x[N,C,H,W], w[K,C,R,S], bias[K] or undefined -> y[N,K,P,Q]
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt);
// Fused blocks, the same mathematics as the composition in fewer passes over memory:
//   conv2d_relu:            relu(conv2d(x, w, bias)), the relu in the convolution's epilogue;
//   conv2d_relu_max_pool2d: max_pool2d(relu(conv2d(...))), and in backward the relu's mask is
//                           folded into the pooling's gather.
// layers::Sequential runs conv, relu[, pool] children through these (layers/module.cpp).
Tensor conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt);
Tensor conv2d_relu_max_pool2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& conv,
                              const Pool2dOptions& pool);
// x[..., in], w[out,in], bias[out] or undefined -> y[..., out]: any leading dimensions
// (none, for a 1-d x), as torch.nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt);
// max_pool2d's rules for its options (positive kernel and stride; padding at most half the
// kernel, PyTorch's rule, so that no window is padding only). max_pool2d checks them; a
// module can check them early, when the model is built.
void check_max_pool2d_options(const Pool2dOptions& opt);
// Batch normalisation of x[N,C,H,W] per channel, torch.nn.functional.batch_norm.
// training: normalises with the batch's mean and biased variance over (N, H, W), and, when
// running_mean and running_var are defined, updates them in place: (1 - momentum) * old +
// momentum * batch statistic, the variance unbiased (n / (n - 1), n = N*H*W). Fails, as
// PyTorch does, with only one value per channel. eval: normalises with running_mean and
// running_var (required) and changes nothing. y = (x - mean) / sqrt(var + eps) * weight +
// bias; weight and bias [C] are both defined (affine) or both undefined.
//
// With a group (training only), the batch norm is synchronised over the group's replicas
// (torch.nn.SyncBatchNorm): the statistics are those of the union of all replicas' inputs,
// so R replicas normalise exactly as one replica on the whole micro-batch would (to
// rounding). Forward allgathers each replica's (count, mean, biased variance) per channel
// and combines them in rank order; backward sums the two per-channel gradient sums over
// the group. Every replica of the group must call it, with the same layer order.
class BatchNormGroup;
Tensor batch_norm2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                    Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5,
                    BatchNormGroup* group = nullptr);
// The replicas a synchronised batch norm combines its statistics over. train/ implements
// it over a comm::Communicator; the engine knows only this interface.
class BatchNormGroup {
 public:
  virtual ~BatchNormGroup() = default;
  virtual int size() const = 0;
  // Samples of the current micro-batch over the whole group: the runner sets it before
  // each forward (the replicas' shares may differ; their sum is known to all).
  virtual int64_t rows() const = 0;
  // out [size() * in.numel()] <- every replica's `in`, in rank order (blocking).
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // t <- the elementwise sum of t over the group, in place (blocking).
  virtual void all_sum(Tensor& t) = 0;
};
Tensor relu(const Tensor& x);
// avg_pool2d with PyTorch's semantics: the mean of each window, floor mode, padding at most
// half the kernel (max_pool2d's rule). count_include_pad (PyTorch's default) counts the
// padding as zeros, so every window divides by kernel_h * kernel_w; false divides by the
// window's real elements.
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt, bool count_include_pad = true);
// Global average pooling x[N,C,H,W] -> y[N,C,1,1], the mean of each plane: PyTorch's
// adaptive_avg_pool2d(x, 1), what a ResNet runs before its classifier.
Tensor global_avg_pool2d(const Tensor& x);
// Same elements, new shape; one entry may be -1 (inferred). An inferred LEADING entry is
// the batch idiom x.view(-1, F): if it would change the batch size the op fails, naming
// the shapes (the silent 64 -> 256 rows mistake of the data-parallel article).
Tensor reshape(const Tensor& x, const Shape& shape);
// The shape reshape would produce, with the same checks (used to validate models early).
Shape resolve_reshape(const Shape& input, const Shape& shape);
// Rows [begin, end) of x along its first dimension, sharing x's data (torch.narrow(x, 0,
// begin, end - begin)); backward adds the gradient into those rows of x's (in place when x
// is a parameter with a gradient buffer). Fails naming the rows and the shape.
Tensor narrow0(const Tensor& x, int64_t begin, int64_t end);
// Keeps dim 0 and flattens the rest: [N, ...] -> [N, prod(...)]
Tensor flatten(const Tensor& x);
// Over the last dimension of a 2-d tensor.
Tensor log_softmax(const Tensor& x);
// logp[N,C] log-probabilities, target[N] int64 in [0, C).
Tensor nll_loss(const Tensor& logp, const Tensor& target, Reduction reduction = Reduction::Mean);
// log_softmax + nll_loss fused in one pass (the probabilities are never stored), PyTorch's
// F.cross_entropy with classes LAST: logits [..., C] (e.g. [N, T, C]), target [...] int64
// in [0, C) or ignore_index. Ignored targets add neither loss nor gradient; the mean is the
// sum over the counted targets divided by their number (NaN when all are ignored, as
// PyTorch's 0/0).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = kernels::kDefaultIgnoreIndex);
// The number of targets cross_entropy counts (those that are not ignore_index): an int64
// scalar on target's device, computed there without a sync. It is the mean's divisor; a
// data-parallel runner that weights micro-batches by tokens (issue 24, item 5) sums these
// counts over micro-batches and replicas and seeds each Reduction::Sum loss with
// 1 / total, as it now seeds with 1 / samples.
Tensor cross_entropy_count(const Tensor& target, int64_t ignore_index = kernels::kDefaultIgnoreIndex);
Tensor add(const Tensor& a, const Tensor& b);
// Tensor.to(dtype) between float32 and bfloat16 / float16 (round to nearest even; back to
// float32 exactly): x itself when it already has the dtype; other pairs fail, naming them.
// The backward casts the gradient back to x's dtype.
Tensor to(const Tensor& x, DType dtype);
// `cast`, which holds to(x, cast.dtype())'s values already (made by one cast of a whole
// flat buffer: engine/low_precision_parameters.h), recorded as that op: its backward
// casts the gradient back to x's dtype. Returns cast.
Tensor as_cast_of(const Tensor& x, Tensor cast);
Tensor scale(const Tensor& x, double factor);
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
// ---- batched_matmul: torch.matmul of 3-d or 4-d operands with equal batch dimensions
// (no broadcasting): a[..., M, K] x b[..., K, N] -> c[..., M, N]. trans_a / trans_b read
// the operand's last two dims transposed (a[..., K, M], b[..., N, K]) without a copy, so
// attention's Q K^T is batched_matmul(q, k, false, true).
Tensor batched_matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// ---- gelu, tanh, dropout (issue 24) ----
// torch.nn.functional.gelu(x, approximate): "none", 0.5 x (1 + erf(x / sqrt 2)), or "tanh",
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); anything else fails, naming it. Backward
// keeps x and applies the chosen form's exact derivative.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
// torch.tanh; backward keeps the output: dx = dy (1 - y^2).
Tensor tanh(const Tensor& x);
// Inverted dropout, torch.nn.functional.dropout: in training each element of x [N, ...] is
// kept with probability 1 - p and scaled by 1 / (1 - p), or zeroed (x * 0, so NaN stays
// NaN); p = 0 and eval return x itself, p = 1 zeroes everything, p outside [0, 1] fails.
// The mask is a pure function of (seed, step, global sample first_sample + n, element
// within the sample) (kernels/dropout_config.h): the same bits on every backend, for any
// thread count and any split of a batch over replicas, and for the same step after a resume. Backward
// recomputes it (nothing is stored).
struct DropoutOptions {
  double p = 0.5;
  bool training = true;
  uint64_t seed = 0;
  uint64_t step = 0;         // the training step: a new mask each step
  int64_t first_sample = 0;  // global index of x's first sample in the whole batch
};
Tensor dropout(const Tensor& x, const DropoutOptions& opt);
// ---- scaled_dot_product_attention ----
// torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask, is_causal=causal,
// scale=scale) as one op, FlashAttention-2 style (kernels/attention_shape.h):
// q[B,H,Tq,d], k and v[B,H,Tk,d] -> softmax(q k^T * scale + mask) v [B,H,Tq,d]. The
// key-padding mask [B,Tk] (undefined: none) has q's dtype, 1 = attend and 0 = padding, as
// Hugging Face's attention_mask; causal lets query i see keys j <= i (top-left aligned).
// A query that sees no key gives 0 and passes no gradient (PyTorch gives NaN).
struct AttentionOptions {
  bool causal = false;
  std::optional<double> scale;  // default 1 / sqrt(d)
};
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& key_padding_mask = Tensor(), const AttentionOptions& opt = {});

// embedding (torch.nn.functional.embedding): int64 ids of any shape [...] pick rows of
// weight [V, D], giving [..., D]. Row padding_idx (negative counts from V, as in PyTorch)
// gets no gradient. An id outside [0, V) fails naming the id, its position and V.
Tensor embedding(const Tensor& ids, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);
// layer_norm
// torch.nn.functional.layer_norm(x, (D,), weight, bias, eps): each row of the last
// dimension D of x [..., D] normalised by its mean and biased variance,
// y = (x - mean) / sqrt(var + eps) * weight + bias; weight and bias [D] are both defined
// (affine) or both undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// softmax
// softmax(x + mask) over the last dimension of x [..., Tq, Tk]: torch.softmax(x + mask, -1)
// with mask undefined or broadcast as PyTorch broadcasts (its last dimension Tk; the accepted
// shapes are listed in kernels/softmax_mask.h), and causal masking key j of query i when
// j > i (top-left: scaled_dot_product_attention's is_causal). A row masked everywhere is NaN,
// as in PyTorch. The mask takes no gradient.
Tensor softmax(const Tensor& x, const Tensor& mask = Tensor(), bool causal = false);
// transpose
// torch.transpose(x, dim0, dim1).contiguous(): a new contiguous tensor with the two
// dimensions swapped (negative dims count from the end; equal dims give x itself);
// backward swaps the gradient back. How attention splits and merges its heads.
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);

}  // namespace dpcore::ops
