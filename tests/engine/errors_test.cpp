// Every op rejects bad input with a message that names the op and the shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/ops.h"

namespace dpcore {
namespace {

// Runs f, expects an Error whose message contains every piece of `expected`.
template <class F>
void expect_error(F&& f, std::initializer_list<const char*> expected) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    for (const char* piece : expected) EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
  }
}

TEST(OpErrors, Conv2dChannelMismatch) {
  Tensor x = Tensor::zeros({2, 3, 8, 8}), w = Tensor::zeros({4, 2, 3, 3});
  expect_error([&] { ops::conv2d(x, w, Tensor(), {}); }, {"conv2d", "[2, 3, 8, 8]", "[4, 2, 3, 3]"});
}

TEST(OpErrors, Conv2dKernelLargerThanInput) {
  Tensor x = Tensor::zeros({1, 1, 2, 2}), w = Tensor::zeros({1, 1, 3, 3});
  expect_error([&] { ops::conv2d(x, w, Tensor(), {}); }, {"conv2d", "[1, 1, 2, 2]"});
}

TEST(OpErrors, LinearFeatureMismatch) {
  Tensor x = Tensor::zeros({64, 1024}), w = Tensor::zeros({10, 4096});
  expect_error([&] { ops::linear(x, w, Tensor()); }, {"linear", "[64, 1024]", "[10, 4096]"});
}

TEST(OpErrors, TheArticlesFlattenMistake) {
  // simplenet on 32x32 inputs: after conv+pool the activation is [64, 16, 16, 16];
  // view(-1, 16*8*8) would turn the batch of 64 into 256 rows.
  Tensor h = Tensor::zeros({64, 16, 16, 16});
  expect_error([&] { ops::reshape(h, {-1, 16 * 8 * 8}); }, {"reshape", "[64, 16, 16, 16]", "4096", "1024", "256"});
  // The right per-sample size is fine.
  EXPECT_EQ(ops::reshape(h, {-1, 4096}).shape(), (Shape{64, 4096}));
}

TEST(OpErrors, ReshapeWrongElementCount) {
  expect_error([&] { ops::reshape(Tensor::zeros({2, 3}), {4, 2}); }, {"reshape", "[2, 3]", "[4, 2]"});
}

TEST(OpErrors, TargetsOutOfRange) {
  Tensor logp = Tensor::zeros({3, 10});
  expect_error([&] { ops::nll_loss(logp, Tensor::from_vector<int64_t>({1, 10, 2}, {3})); },
               {"nll_loss", "target 10", "row 1", "[0, 10)"});
  expect_error([&] { ops::cross_entropy(logp, Tensor::from_vector<int64_t>({-1, 0, 2}, {3})); },
               {"cross_entropy", "target -1", "row 0"});
}

TEST(OpErrors, TargetCountAndTypeMismatch) {
  Tensor logp = Tensor::zeros({3, 10});
  expect_error([&] { ops::nll_loss(logp, Tensor::from_vector<int64_t>({1, 2}, {2})); }, {"nll_loss", "[3, 10]", "[2]"});
  expect_error([&] { ops::nll_loss(logp, Tensor::zeros({3})); }, {"nll_loss", "int64"});
}

TEST(OpErrors, AddDoesNotBroadcast) {
  expect_error([&] { ops::add(Tensor::zeros({2, 3}), Tensor::zeros({3})); }, {"add", "[2, 3]", "[3]"});
}

TEST(OpErrors, MixedDtypes) {
  Tensor x = Tensor::zeros({2, 4}), w = Tensor::zeros({3, 4}, DType::Float64);
  expect_error([&] { ops::linear(x, w, Tensor()); }, {"linear", "float32", "float64"});
}

// Every window must hold at least one real element, or its argmax would point into the
// padding: PyTorch's bound, padding at most half the kernel. The op enforces it for every
// backend before any kernel runs (the kernels rely on it).
TEST(OpErrors, PoolPaddingMoreThanHalfTheKernel) {
  ops::Pool2dOptions opt{2, 2, 2, 2, 2, 2};
  expect_error([&] { ops::max_pool2d(Tensor::zeros({1, 1, 4, 4}), opt); }, {"max_pool2d", "padding"});
  opt.pad_w = 0;
  EXPECT_THROW(ops::check_max_pool2d_options(opt), dpcore::Error);
  opt.pad_h = 1;  // exactly half the kernel: allowed
  EXPECT_NO_THROW(ops::check_max_pool2d_options(opt));
}

// batch_norm2d names itself and the shapes; PyTorch's rule for a batch with one value per
// channel holds in training only.
TEST(OpErrors, BatchNorm2dInputs) {
  Tensor x = Tensor::zeros({2, 3, 4, 4}), w = Tensor::zeros({4}), b = Tensor::zeros({3}), none;
  Tensor running_mean = Tensor::zeros({3}), running_var = Tensor::full({3}, 1.0);
  expect_error([&] { ops::batch_norm2d(x, w, b, running_mean, running_var, true); },
               {"batch_norm2d", "weight", "[4]", "[2, 3, 4, 4]"});
  expect_error([&] { ops::batch_norm2d(Tensor::zeros({2, 3, 4}), none, none, running_mean, running_var, true); },
               {"batch_norm2d", "4 dimensions"});
  Tensor one_value = Tensor::zeros({1, 3, 1, 1});
  expect_error([&] { ops::batch_norm2d(one_value, none, none, running_mean, running_var, true); },
               {"batch_norm2d", "more than 1 value per channel when training", "[1, 3, 1, 1]"});
  EXPECT_NO_THROW(ops::batch_norm2d(one_value, none, none, running_mean, running_var, false));
  expect_error([&] { ops::batch_norm2d(x, none, none, none, none, false); }, {"batch_norm2d", "eval", "running_mean"});
  expect_error([&] { ops::batch_norm2d(x, b, none, running_mean, running_var, true); }, {"batch_norm2d", "affine"});
}

// avg_pool2d keeps max_pool2d's padding rule (PyTorch's), so that no window is padding
// only; global pooling wants NCHW planes with at least one element.
TEST(OpErrors, AveragePoolingInputs) {
  expect_error([&] { ops::avg_pool2d(Tensor::zeros({1, 1, 4, 4}), ops::Pool2dOptions{2, 2, 2, 2, 2, 0}); },
               {"avg_pool2d", "padding"});
  expect_error([&] { ops::avg_pool2d(Tensor::zeros({1, 1, 2, 2}), ops::Pool2dOptions{3, 3, 1, 1, 0, 0}); },
               {"avg_pool2d", "[1, 1, 2, 2]"});
  expect_error([&] { ops::global_avg_pool2d(Tensor::zeros({2, 3, 4})); }, {"global_avg_pool2d", "4 dimensions"});
  expect_error([&] { ops::global_avg_pool2d(Tensor::zeros({2, 3, 0, 4})); }, {"global_avg_pool2d", "[2, 3, 0, 4]"});
}

// ---- gelu, tanh, dropout (issue 24) ----
TEST(OpErrors, GeluApproximateIsNoneOrTanh) {
  Tensor x = Tensor::zeros({2, 3});
  expect_error([&] { ops::gelu(x, "erf"); }, {"gelu", "approximate", "'none' or 'tanh'", "'erf'"});
}

TEST(OpErrors, ActivationsTakeFloatTensors) {
  Tensor ids = Tensor::zeros({2, 3}, DType::Int64);
  expect_error([&] { ops::gelu(ids); }, {"gelu", "input"});
  expect_error([&] { ops::tanh(ids); }, {"tanh", "input"});
  expect_error([&] { ops::dropout(ids, {}); }, {"dropout", "input"});
}

TEST(OpErrors, DropoutProbabilityAndSampleRange) {
  Tensor x = Tensor::zeros({4, 3});
  for (double p : {-0.1, 1.5, std::nan("")})
    expect_error([&] { ops::dropout(x, {p, true, 0, 0, 0}); }, {"dropout", "p = ", "outside [0, 1]"});
  // In eval too: a wrong p is a wrong configuration whatever the mode.
  expect_error([&] { ops::dropout(x, {1.5, false, 0, 0, 0}); }, {"dropout", "p = 1.5"});
  expect_error([&] { ops::dropout(Tensor::zeros({}), {}); }, {"dropout", "no sample dimension"});
  expect_error([&] { ops::dropout(x, {0.5, true, 0, 0, -1}); }, {"dropout", "[4, 3]", "first_sample -1", "2^32"});
  expect_error([&] { ops::dropout(x, {0.5, true, 0, 0, (int64_t(1) << 32) - 2}); },
               {"dropout", "[4, 3]", "first_sample 4294967294 with the 4 samples", "2^32"});
}

TEST(OpErrors, ScaledDotProductAttentionShapes) {
  const char* op = "scaled_dot_product_attention";
  Tensor q = Tensor::zeros({2, 4, 5, 8}), k = Tensor::zeros({2, 4, 7, 8}), v = Tensor::zeros({2, 4, 7, 8});
  expect_error([&] { ops::scaled_dot_product_attention(q, Tensor::zeros({2, 4, 7, 6}), Tensor::zeros({2, 4, 7, 6})); },
               {op, "[2, 4, 5, 8]", "[2, 4, 7, 6]", "d must agree"});
  expect_error([&] { ops::scaled_dot_product_attention(q, k, Tensor::zeros({2, 4, 6, 8})); },
               {op, "[2, 4, 7, 8]", "[2, 4, 6, 8]", "same shape"});
  expect_error([&] { ops::scaled_dot_product_attention(q, Tensor::zeros({2, 3, 7, 8}), Tensor::zeros({2, 3, 7, 8})); },
               {op, "[2, 4, 5, 8]", "[2, 3, 7, 8]"});
  expect_error([&] { ops::scaled_dot_product_attention(Tensor::zeros({2, 5, 8}), k, v); }, {op, "query"});
  // The key-padding mask is [B, Tk], in the query's dtype.
  expect_error([&] { ops::scaled_dot_product_attention(q, k, v, Tensor::zeros({2, 5})); },
               {op, "key_padding_mask", "[2, 5]", "[B, Tk] = [2, 7]"});
  expect_error([&] { ops::scaled_dot_product_attention(q, k, v, Tensor::zeros({2, 4, 7})); },
               {op, "key_padding_mask", "[2, 4, 7]"});
  expect_error([&] { ops::scaled_dot_product_attention(q, k, v, Tensor::zeros({2, 7}, DType::Float64)); },
               {op, "key_padding_mask", "float64", "dtype"});
  expect_error([&] { ops::scaled_dot_product_attention(q, k, v, Tensor(), {false, INFINITY}); }, {op, "scale", "inf"});
  Tensor empty_heads = Tensor::zeros({2, 4, 7, 0});
  expect_error([&] { ops::scaled_dot_product_attention(Tensor::zeros({2, 4, 5, 0}), empty_heads, empty_heads); },
               {op, "head dimension d = 0"});
}

// ---- batched_matmul and linear over leading dimensions ----
TEST(OpErrors, BatchedMatmulShapes) {
  Tensor a = Tensor::zeros({2, 3, 4}), b = Tensor::zeros({2, 4, 5});
  expect_error([&] { ops::batched_matmul(Tensor::zeros({3, 4}), Tensor::zeros({4, 5})); },
               {"batched_matmul", "[3, 4]", "3 or 4 dimensions"});
  expect_error([&] { ops::batched_matmul(a, Tensor::zeros({3, 4, 5})); },
               {"batched_matmul", "[2, 3, 4]", "[3, 4, 5]", "batch dimensions", "broadcasting"});
  expect_error([&] { ops::batched_matmul(a, Tensor::zeros({1, 2, 4, 5})); },
               {"batched_matmul", "[2, 3, 4]", "[1, 2, 4, 5]", "batch dimensions"});
  expect_error([&] { ops::batched_matmul(a, b, false, true); },
               {"batched_matmul", "a [2, 3, 4]", "b [2, 4, 5] transposed", "4 columns", "5 rows"});
  expect_error([&] { ops::batched_matmul(a, b, true, false); },
               {"batched_matmul", "a [2, 3, 4] transposed", "3 columns", "4 rows"});
  expect_error([&] { ops::batched_matmul(a, Tensor::zeros({2, 4, 5}, DType::Float64)); },
               {"batched_matmul", "float32", "float64"});
  EXPECT_EQ(ops::batched_matmul(a, b).shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(ops::batched_matmul(a, Tensor::zeros({2, 5, 4}), false, true).shape(), (Shape{2, 3, 5}));
}

TEST(OpErrors, LinearOverLeadingDimensionsNamesTheShapes) {
  Tensor w = Tensor::zeros({10, 64});
  expect_error([&] { ops::linear(Tensor::zeros({2, 7, 32}), w, Tensor()); }, {"linear", "[2, 7, 32]", "[10, 64]", "32"});
  expect_error([&] { ops::linear(Tensor::zeros({}), w, Tensor()); }, {"linear", "at least 1 dimension"});
  EXPECT_EQ(ops::linear(Tensor::zeros({2, 7, 64}), w, Tensor()).shape(), (Shape{2, 7, 10}));
  EXPECT_EQ(ops::linear(Tensor::zeros({64}), w, Tensor()).shape(), (Shape{10}));
}

// embedding: an id outside [0, V) names the id, its (flat) position and V; ids must be
// int64, the table 2-d, padding_idx within [-V, V).
TEST(OpErrors, EmbeddingBadIdsTableAndPadding) {
  Tensor w = Tensor::zeros({10, 4});
  expect_error([&] { ops::embedding(Tensor::from_vector<int64_t>({1, 2, 3, 10}, {2, 2}), w); },
               {"embedding", "id 10", "position 3", "[0, 10)"});
  expect_error([&] { ops::embedding(Tensor::from_vector<int64_t>({-1}, {1}), w); },
               {"embedding", "id -1", "position 0", "[0, 10)"});
  expect_error([&] { ops::embedding(Tensor::zeros({3}), w); }, {"embedding", "ids", "int64", "float32"});
  expect_error([&] { ops::embedding(Tensor::from_vector<int64_t>({1}, {1}), Tensor::zeros({10})); },
               {"embedding", "weight", "[10]"});
  expect_error([&] { ops::embedding(Tensor::from_vector<int64_t>({1}, {1}), w, 10); },
               {"embedding", "padding_idx 10", "[-10, 10)", "[10, 4]"});
  expect_error([&] { ops::embedding(Tensor::from_vector<int64_t>({1}, {1}), w, -11); },
               {"embedding", "padding_idx -11", "[-10, 10)", "[10, 4]"});
}

// cross_entropy over [..., C]: a target outside [0, C) that is not ignore_index names the
// value, its row and ignore_index; the target's shape must be the logits' without C.
TEST(OpErrors, CrossEntropyOverTokens) {
  Tensor logits = Tensor::zeros({2, 3, 10});
  expect_error([&] { ops::cross_entropy(logits, Tensor::from_vector<int64_t>({1, -100, 2, 10, 0, 0}, {2, 3})); },
               {"cross_entropy", "target 10", "row 3", "[0, 10)", "ignore_index -100"});
  const Tensor class_zero_ignored = Tensor::from_vector<int64_t>({1, -100, 2, 3, 0, 0}, {2, 3});
  expect_error([&] { ops::cross_entropy(logits, class_zero_ignored, ops::Reduction::Mean, 0); },
               {"cross_entropy", "target -100", "row 1", "ignore_index 0"});
  expect_error([&] { ops::cross_entropy(logits, Tensor::from_vector<int64_t>({1, 2, 3}, {3})); },
               {"cross_entropy", "[2, 3, 10]", "[2, 3]", "[3]"});
  expect_error([&] { ops::cross_entropy(logits, Tensor::zeros({2, 3})); }, {"cross_entropy", "int64"});
  expect_error([&] { ops::cross_entropy_count(Tensor::zeros({2, 3})); }, {"cross_entropy_count", "int64"});
}

TEST(OpErrors, TransposeDimOutOfRange) {
  expect_error([&] { ops::transpose(Tensor::zeros({2, 3, 4}), 0, 3); }, {"transpose", "dim 3", "[-3, 3)", "[2, 3, 4]"});
  expect_error([&] { ops::transpose(Tensor::zeros({2, 3}), -3, 0); }, {"transpose", "dim -3"});
}

}  // namespace
}  // namespace dpcore
