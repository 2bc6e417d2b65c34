// ops::layer_norm and ops::softmax against Debian's PyTorch 1.13
// (tests/engine/torch_layer_norm_softmax.py, one process for every case of both ops):
// layer_norm's y and the gradients of sum(y * dy) for x, weight and bias on inputs of 1 to 3
// dimensions, affine and not; softmax(x + mask) and its x gradient for each mask broadcast
// (masks with -inf entries) and causal with as many, fewer and more queries than keys; each
// in float64 and float32. And both ops' errors, naming the op and the shapes.
//
// Tolerances: float64 within 1e-10 of the largest element (both sides compute in double;
// only the order of the sums differs, <= 64 terms: ~1e-15). float32: PyTorch's CPU kernels
// accumulate in float (in their own order), ours in double; each side is within a few float
// roundings of the exact value (layer_norm: mean and rstd from sums of D = 64 terms, then 4
// operations, about 64 * 2^-24 = 4e-6 of the scale at worst; softmax: x + mask rounded once
// by PyTorch, exp and a sum of <= 65 terms), so they differ by at most 1e-5 of the largest
// element; dweight and dbias add 24 rows on top (24 * 2^-24 more).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "support/error_of.h"
#include "support/kernel_checks.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

struct LayerNormCase {
  std::string name;
  Shape shape;
  bool affine;
  double eps;
  DType dtype;
};

struct SoftmaxCase {
  std::string name;
  Shape shape, mask;  // mask empty: none
  bool causal;
  DType dtype;
};

const char* dtype_arg(DType dtype) { return dtype == DType::Float64 ? "float64" : "float32"; }

std::string shape_arg(const Shape& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s.empty() ? "-" : s;
}

// The values of a tensor the script wrote; null is -inf (a masked entry: JSON has no infinity).
Tensor from_json(const nlohmann::json& values, const Shape& shape, DType dtype) {
  std::vector<double> v;
  for (const nlohmann::json& e : values) v.push_back(e.is_null() ? -INFINITY : e.get<double>());
  return dtype == DType::Float64 ? Tensor::from_vector(v, shape)
                                 : Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape);
}

// Largest |got - want| over the largest |want|.
double normwise(const Tensor& got, const nlohmann::json& want) {
  std::vector<double> values;
  if (got.dtype() == DType::Float64) {
    values = got.to_vector<double>();
  } else {
    const auto floats = got.to_vector<float>();
    values.assign(floats.begin(), floats.end());
  }
  return testing::normwise_error(values, want.get<std::vector<double>>());
}

TEST(LayerNormAndSoftmax, MatchTorchForwardAndBackward) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  const std::vector<LayerNormCase> layer_norm_cases = {
      {"ln_vector_f64", {7}, true, 1e-5, DType::Float64},         {"ln_rows_f64", {6, 64}, true, 1e-5, DType::Float64},
      {"ln_batch_seq_f64", {2, 3, 16}, true, 1e-3, DType::Float64}, {"ln_no_affine_f64", {5, 9}, false, 1e-5, DType::Float64},
      {"ln_rows_f32", {24, 64}, true, 1e-5, DType::Float32},      {"ln_no_affine_f32", {2, 4, 33}, false, 1e-5, DType::Float32},
  };
  const std::vector<SoftmaxCase> softmax_cases = {
      {"sm_plain_f64", {5, 9}, {}, false, DType::Float64},
      {"sm_same_shape_f64", {2, 3, 4, 6}, {2, 3, 4, 6}, false, DType::Float64},
      {"sm_key_mask_causal_f64", {2, 3, 5, 5}, {2, 1, 1, 5}, true, DType::Float64},
      {"sm_shared_mask_f64", {2, 3, 4, 6}, {4, 6}, false, DType::Float64},
      {"sm_vector_mask_f64", {3, 7}, {7}, false, DType::Float64},
      {"sm_causal_fewer_queries_f64", {2, 3, 6}, {}, true, DType::Float64},
      {"sm_causal_more_queries_f64", {2, 6, 3}, {}, true, DType::Float64},
      {"sm_key_mask_causal_f32", {2, 4, 16, 65}, {2, 1, 1, 65}, true, DType::Float32},
  };
  testing::TempDir dir;
  const std::string out = dir.file("torch_layer_norm_softmax.json");
  std::string args = "'" + out + "'";
  for (const LayerNormCase& c : layer_norm_cases)
    args += " " + c.name + ":layer_norm:" + shape_arg(c.shape) + ":" + (c.affine ? "1" : "0") + ":" +
            std::to_string(c.eps) + ":" + dtype_arg(c.dtype);
  for (const SoftmaxCase& c : softmax_cases)
    args += " " + c.name + ":softmax:" + shape_arg(c.shape) + ":" + shape_arg(c.mask) + ":" + (c.causal ? "1" : "0") +
            ":" + dtype_arg(c.dtype);
  const testing::ScriptResult script = testing::run_python_script("tests/engine/torch_layer_norm_softmax.py", args);
  ASSERT_EQ(script.status, 0) << script.output;
  std::ifstream f(out);
  const nlohmann::json torch = nlohmann::json::parse(f);
  for (const LayerNormCase& c : layer_norm_cases) {
    SCOPED_TRACE(c.name);
    const nlohmann::json& want = torch.at(c.name);
    const int64_t d = c.shape.back();
    const double tolerance = c.dtype == DType::Float64 ? 1e-10 : 1e-5;
    Tensor x = from_json(want.at("x"), c.shape, c.dtype), dy = from_json(want.at("dy"), c.shape, c.dtype);
    Tensor w = from_json(want.at("w"), {d}, c.dtype), b = from_json(want.at("b"), {d}, c.dtype);
    x.set_requires_grad(true), w.set_requires_grad(true), b.set_requires_grad(true);
    Tensor y = c.affine ? ops::layer_norm(x, w, b, c.eps) : ops::layer_norm(x, Tensor(), Tensor(), c.eps);
    EXPECT_LE(normwise(y, want.at("y")), tolerance) << "y";
    y.backward(dy);
    EXPECT_LE(normwise(x.grad(), want.at("dx")), tolerance) << "dx";
    if (!c.affine) continue;
    EXPECT_LE(normwise(w.grad(), want.at("dw")), tolerance + 24 * 6e-8) << "dweight";
    EXPECT_LE(normwise(b.grad(), want.at("db")), tolerance + 24 * 6e-8) << "dbias";
  }
  for (const SoftmaxCase& c : softmax_cases) {
    SCOPED_TRACE(c.name);
    const nlohmann::json& want = torch.at(c.name);
    const double tolerance = c.dtype == DType::Float64 ? 1e-10 : 1e-5;
    Tensor x = from_json(want.at("x"), c.shape, c.dtype), dy = from_json(want.at("dy"), c.shape, c.dtype);
    const Tensor mask = c.mask.empty() ? Tensor() : from_json(want.at("mask"), c.mask, c.dtype);
    x.set_requires_grad(true);
    Tensor y = ops::softmax(x, mask, c.causal);
    EXPECT_LE(normwise(y, want.at("y")), tolerance) << "y";
    y.backward(dy);
    EXPECT_LE(normwise(x.grad(), want.at("dx")), tolerance) << "dx";
  }
}

TEST(LayerNorm, ErrorsNameTheOpAndShapes) {
  const Tensor x = Tensor::zeros({2, 4}, DType::Float32, Device::cpu()), w4 = Tensor::zeros({4}, DType::Float32, Device::cpu());
  const Tensor w3 = Tensor::zeros({3}, DType::Float32, Device::cpu());
  EXPECT_EQ(testing::error_of([&] { ops::layer_norm(x, w3, w3); }),
            "layer_norm: weight [3] does not match the last dimension 4 of input [2, 4]");
  EXPECT_EQ(testing::error_of([&] { ops::layer_norm(x, w4, Tensor()); }),
            "layer_norm: weight and bias must both be defined (affine) or both undefined");
  EXPECT_EQ(testing::error_of([&] { ops::layer_norm(x, Tensor(), Tensor(), -1.0); }),
            "layer_norm: eps -1 must be non-negative");
  EXPECT_EQ(testing::error_of([&] { ops::layer_norm(Tensor::zeros({2, 0}, DType::Float32, Device::cpu()), Tensor(), Tensor()); }),
            "layer_norm: input [2, 0] has no last dimension to normalise over");
  const Tensor w4_f64 = Tensor::zeros({4}, DType::Float64, Device::cpu());
  EXPECT_EQ(testing::error_of([&] { ops::layer_norm(x, w4, w4_f64); }),
            "layer_norm: bias " + w4_f64.str() + " must be float32 for input " + x.str());
  // A 16-bit input takes float32 weight and bias (its compute dtype), as PyTorch's does.
  const Tensor x16 = Tensor::zeros({2, 4}, DType::BFloat16, Device::cpu());
  EXPECT_EQ(testing::error_of([&] { ops::layer_norm(x16, x16.view({8}).narrow0(0, 4), w4); }),
            "layer_norm: weight bfloat16[4] on cpu must be float32 for input " + x16.str());
}

TEST(Softmax, ErrorsNameTheOpAndShapes) {
  const Tensor x = Tensor::zeros({2, 3, 4, 5}, DType::Float32, Device::cpu());
  EXPECT_EQ(testing::error_of([&] { ops::softmax(x, Tensor::zeros({2, 5}, DType::Float32, Device::cpu())); }),
            "softmax: mask [2, 5] does not broadcast against input [2, 3, 4, 5] (dimension 0 of the mask is 2, not 1 "
            "or 4)");
  EXPECT_EQ(testing::error_of([&] { ops::softmax(x, Tensor::zeros({2, 1, 1, 4}, DType::Float32, Device::cpu())); }),
            "softmax: mask [2, 1, 1, 4] does not broadcast against input [2, 3, 4, 5] (it needs at most 4 dimensions "
            "and a last dimension of 5)");
  EXPECT_EQ(testing::error_of([&] { ops::softmax(x, Tensor::zeros({1, 2, 3, 4, 5}, DType::Float32, Device::cpu())); }),
            "softmax: mask [1, 2, 3, 4, 5] does not broadcast against input [2, 3, 4, 5] (it needs at most 4 "
            "dimensions and a last dimension of 5)");
  const Tensor mask_f64 = Tensor::zeros({5}, DType::Float64, Device::cpu());
  EXPECT_EQ(testing::error_of([&] { ops::softmax(x, mask_f64); }),
            "softmax: mixed dtypes: " + x.str() + " and " + mask_f64.str());
  EXPECT_EQ(testing::error_of([&] { ops::softmax(Tensor::zeros({5}, DType::Float32, Device::cpu()), Tensor(), true); }),
            "softmax: causal needs an input of at least 2 dimensions [..., Tq, Tk], got [5]");
  EXPECT_EQ(testing::error_of([&] { ops::softmax(Tensor::zeros({3, 0}, DType::Float32, Device::cpu())); }),
            "softmax: input [3, 0] has no last dimension to normalise over");
}

}  // namespace
}  // namespace dpcore
