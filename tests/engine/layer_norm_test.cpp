// ops::layer_norm against torch.nn.functional.layer_norm run by Debian's PyTorch 1.13
// (tests/engine/torch_layer_norm.py, one process for every case): y and the gradients of
// sum(y * dy) for x, weight and bias, on inputs of 1 to 3 dimensions, affine and not, in
// float64 and float32; and its errors, naming the op and the shapes.
//
// Tolerances: float64 within 1e-10 of the largest element (both sides compute in double;
// only the order of the sums differs, D <= 64 terms: ~1e-15). float32: PyTorch's CPU
// kernel accumulates its float statistics in float (or its own pairwise order), ours in
// double; each side's y and dx are within a few float roundings of the exact value (mean
// and rstd from sums of D = 64 terms of |x| <= ~10, then 4 operations: about 64 * 2^-24 =
// 4e-6 of the scale at worst), so the difference is bounded by 1e-5 of the largest element;
// dweight and dbias add 24 rows on top (24 * 2^-24 more).
#include <gtest/gtest.h>

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

struct TorchCase {
  std::string name;
  Shape shape;
  bool affine;
  double eps;
  DType dtype;
};

std::string shape_arg(const Shape& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

Tensor from_json(const nlohmann::json& values, const Shape& shape, DType dtype) {
  const auto v = values.get<std::vector<double>>();
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

TEST(LayerNorm, MatchesTorchForwardAndBackward) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  const std::vector<TorchCase> cases = {
      {"vector_f64", {7}, true, 1e-5, DType::Float64},       {"rows_f64", {6, 64}, true, 1e-5, DType::Float64},
      {"batch_seq_f64", {2, 3, 16}, true, 1e-3, DType::Float64}, {"no_affine_f64", {5, 9}, false, 1e-5, DType::Float64},
      {"rows_f32", {24, 64}, true, 1e-5, DType::Float32},    {"no_affine_f32", {2, 4, 33}, false, 1e-5, DType::Float32},
  };
  testing::TempDir dir;
  const std::string out = dir.file("torch_layer_norm.json");
  std::string args = "'" + out + "'";
  for (const TorchCase& c : cases)
    args += " " + c.name + ":" + shape_arg(c.shape) + ":" + (c.affine ? "1" : "0") + ":" + std::to_string(c.eps) +
            ":" + (c.dtype == DType::Float64 ? "float64" : "float32");
  const testing::ScriptResult script = testing::run_python_script("tests/engine/torch_layer_norm.py", args);
  ASSERT_EQ(script.status, 0) << script.output;
  std::ifstream f(out);
  const nlohmann::json torch = nlohmann::json::parse(f);
  for (const TorchCase& c : cases) {
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
            "layer_norm: mixed dtypes: " + x.str() + " and " + w4_f64.str());
}

}  // namespace
}  // namespace dpcore
