// batched_matmul and linear over leading dimensions against torch.matmul and
// torch.nn.functional.linear run by Debian's PyTorch 1.13 (tests/engine/torch_batched_matmul.py):
// forward and the gradient of every input, on the script's random inputs and output
// gradient, in float64 and float32. One Python process for every case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "support/kernel_checks.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

struct MatmulCase {
  const char* name;
  Shape batch;
  int64_t M, N, K;
  bool trans_a, trans_b;
};
struct LinearCase {
  const char* name;
  Shape leading;
  int64_t in, out;
};

const MatmulCase kMatmulCases[] = {
    {"plain_3d", {3}, 4, 5, 6, false, false},
    {"scores_qkt_4d", {2, 3}, 7, 7, 8, false, true},  // attention's Q K^T: [batch, heads, tokens, head_dim]
    {"a_transposed", {2}, 5, 3, 4, true, false},
    {"both_transposed_4d", {2, 2}, 3, 6, 5, true, true},
    {"values_pv_4d", {2, 3}, 7, 8, 7, false, false},  // attention's P V
};
const LinearCase kLinearCases[] = {
    {"linear_3d", {2, 7}, 16, 12},
    {"linear_4d", {2, 3, 4}, 5, 6},
    {"linear_1d", {}, 9, 4},
};
const char* const kDtypes[] = {"float32", "float64"};

std::string dims(const Shape& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}
Shape with(Shape shape, std::initializer_list<int64_t> last) {
  shape.insert(shape.end(), last);
  return shape;
}

// Error bound against PyTorch in float32. Each side's dot products of D terms round to
// within gamma_D * sum |a_k b_k| (Higham, Accuracy and Stability, 3.5), gamma_D ~ D u with
// u = 2^-24; for unit normal inputs sum |a_k b_k| is about 0.64 D while the result's rms
// is sqrt(D): relative to the rms, 0.64 D^1.5 u per side. Both sides round, in different
// orders (OpenBLAS and PyTorch's BLAS), so 2 x that; 4 D^1.5 u leaves a factor 3 over it.
// D is the longest reduction of the case (the gradients reduce over the other dims).
// Float64: 1e-10, far above the same analysis (D^1.5 * 2^-53 < 1e-13). Measured over these
// cases: at most 2.5e-7 in float32 (under 5% of its bound), 7.4e-16 in float64.
double tolerance(const std::string& dtype, int64_t longest_reduction) {
  if (dtype == "float64") return 1e-10;
  return 4.0 * std::pow(double(longest_reduction), 1.5) * std::ldexp(1.0, -24);
}

template <class T>
Tensor leaf(const nlohmann::json& values, const Shape& shape) {
  Tensor t = Tensor::from_vector(values.get<std::vector<T>>(), shape);
  t.set_requires_grad(true);
  return t;
}

template <class T>
void expect_matches(const Tensor& got, const nlohmann::json& want, double tol, const char* what) {
  const std::vector<T> g = got.to_vector<T>(), w = want.get<std::vector<T>>();
  EXPECT_LE(testing::scaled_error(g, w), tol) << what;
}

template <class T>
void check_matmul(const MatmulCase& c, const nlohmann::json& torch, double tol) {
  Tensor a = leaf<T>(torch.at("a"), with(c.batch, {c.trans_a ? c.K : c.M, c.trans_a ? c.M : c.K}));
  Tensor b = leaf<T>(torch.at("b"), with(c.batch, {c.trans_b ? c.N : c.K, c.trans_b ? c.K : c.N}));
  Tensor out = ops::batched_matmul(a, b, c.trans_a, c.trans_b);
  EXPECT_EQ(out.shape(), with(c.batch, {c.M, c.N}));
  out.backward(Tensor::from_vector(torch.at("dc").get<std::vector<T>>(), out.shape()));
  expect_matches<T>(out, torch.at("c"), tol, "c");
  expect_matches<T>(a.grad(), torch.at("da"), tol, "da");
  expect_matches<T>(b.grad(), torch.at("db"), tol, "db");
}

template <class T>
void check_linear(const LinearCase& c, const nlohmann::json& torch, double tol) {
  Tensor x = leaf<T>(torch.at("x"), with(c.leading, {c.in}));
  Tensor w = leaf<T>(torch.at("w"), {c.out, c.in}), bias = leaf<T>(torch.at("bias"), {c.out});
  Tensor y = ops::linear(x, w, bias);
  EXPECT_EQ(y.shape(), with(c.leading, {c.out}));
  y.backward(Tensor::from_vector(torch.at("dy").get<std::vector<T>>(), y.shape()));
  expect_matches<T>(y, torch.at("y"), tol, "y");
  expect_matches<T>(x.grad(), torch.at("dx"), tol, "dx");
  expect_matches<T>(w.grad(), torch.at("dw"), tol, "dw");
  expect_matches<T>(bias.grad(), torch.at("dbias"), tol, "dbias");
}

TEST(BatchedMatmulAndLinear, MatchTorchForwardAndBackward) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  testing::TempDir dir;
  const std::string out = dir.file("torch_batched_matmul.json");
  std::string args = "'" + out + "'";
  for (const char* dtype : kDtypes) {
    for (const MatmulCase& c : kMatmulCases)
      args += std::string(" ") + c.name + "_" + dtype + ":" + dtype + ":matmul:" + (c.trans_a ? "1" : "0") + ":" +
              (c.trans_b ? "1" : "0") + ":" + dims(c.batch) + ":" + std::to_string(c.M) + ":" + std::to_string(c.N) +
              ":" + std::to_string(c.K);
    for (const LinearCase& c : kLinearCases)
      args += std::string(" ") + c.name + "_" + dtype + ":" + dtype + ":linear:" + dims(c.leading) + ":" +
              std::to_string(c.in) + ":" + std::to_string(c.out);
  }
  const testing::ScriptResult script = testing::run_python_script("tests/engine/torch_batched_matmul.py", args);
  ASSERT_EQ(script.status, 0) << script.output;
  std::ifstream f(out);
  const nlohmann::json torch = nlohmann::json::parse(f);

  for (const std::string dtype : kDtypes) {
    for (const MatmulCase& c : kMatmulCases) {
      const std::string name = c.name + ("_" + dtype);
      SCOPED_TRACE(name);
      const double tol = tolerance(dtype, std::max({c.M, c.N, c.K}));
      if (dtype == "float64") check_matmul<double>(c, torch.at(name), tol);
      else check_matmul<float>(c, torch.at(name), tol);
    }
    for (const LinearCase& c : kLinearCases) {
      const std::string name = c.name + ("_" + dtype);
      SCOPED_TRACE(name);
      int64_t rows = 1;
      for (int64_t d : c.leading) rows *= d;
      const double tol = tolerance(dtype, std::max({rows, c.in, c.out}));
      if (dtype == "float64") check_linear<double>(c, torch.at(name), tol);
      else check_linear<float>(c, torch.at(name), tol);
    }
  }
}

}  // namespace
}  // namespace dpcore
