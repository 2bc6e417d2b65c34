// gelu (both forms), tanh and dropout against Debian's PyTorch 1.13
// (tests/engine/torch_gelu_tanh_dropout.py, one process for every case), forward and
// backward on random inputs, in float64 and float32 on the CPU. Dropout's masks come from
// a different generator (docs/differences.md), so PyTorch is given dpcore's mask and the
// parity is of what follows from it: y = x * mask / (1 - p), dx = dy * mask / (1 - p).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

struct TorchCase {
  std::string name, op, approximate;
  double p = 0;
};

const TorchCase kCases[] = {{"gelu_none", "gelu", "none"},
                            {"gelu_tanh", "gelu", "tanh"},
                            {"tanh", "tanh", ""},
                            {"dropout_0.1", "dropout", "", 0.1},
                            {"dropout_0.5", "dropout", "", 0.5}};

const Shape kShape = {10, 100};
const ops::DropoutOptions kDropout{0.5, true, 2024, 17, 40};

// The op forward, then backward with dy as the output's gradient: {y, dx}.
template <class T>
std::pair<std::vector<T>, std::vector<T>> run_op(const TorchCase& c, const std::vector<double>& x64,
                                                  const std::vector<double>& dy64) {
  Tensor x = Tensor::from_vector(std::vector<T>(x64.begin(), x64.end()), kShape);
  x.set_requires_grad(true);
  const Tensor dy = Tensor::from_vector(std::vector<T>(dy64.begin(), dy64.end()), kShape);
  ops::DropoutOptions dropout = kDropout;
  dropout.p = c.p;
  const Tensor y = c.op == "gelu"   ? ops::gelu(x, c.approximate)
                   : c.op == "tanh" ? ops::tanh(x)
                                    : ops::dropout(x, dropout);
  y.backward(dy);
  return {y.to_vector<T>(), x.grad().to_vector<T>()};
}

// Largest |got - want| / scale[i] (scale: the size of the terms element i is computed from).
double error_of_scale(const std::vector<double>& got, const std::vector<double>& want,
                      const std::vector<double>& scale) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(scale[i], 1e-300));
  return worst;
}

// Float64: both sides evaluate the same formulas in double (erf, tanh and exp of glibc
// against PyTorch's vectorised Sleef versions, each within an ulp or two): 1e-10 of the
// terms' scale is the bar and leaves five orders of magnitude. Float32: each side
// is within 1e-6 of its terms' scale from the float64 truth (the error analysis of
// tests/ops/gelu_test.cpp and tanh_test.cpp), so they differ by at most 2e-6 of it.
// Dropout is x or dy times one rounded scale on both sides: exact. Measured (1000 elements
// per case): at most 2.7e-16 in float64 and 2.2e-7 in float32.
constexpr double kFloat64Tolerance = 1e-10, kFloat32Tolerance = 2e-6;

TEST(GeluTanhDropout, MatchPyTorch) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  const int64_t n = kShape[0] * kShape[1];
  // Float-representable inputs, so that both dtypes start from the same values; never 0,
  // so that a dropout output is 0 exactly where its mask is.
  std::vector<double> x(static_cast<size_t>(n)), dy(static_cast<size_t>(n));
  {
    const auto xf = testing::random_vector<float>(size_t(n), 61, -6.0, 6.0);
    const auto dyf = testing::random_vector<float>(size_t(n), 62);
    for (size_t i = 0; i < size_t(n); ++i) x[i] = xf[i] == 0.f ? 0.5 : xf[i], dy[i] = dyf[i];
  }
  nlohmann::json cases = nlohmann::json::array();
  for (const TorchCase& c : kCases) {
    nlohmann::json j = {{"name", c.name}, {"op", c.op}, {"shape", kShape}, {"x", x}, {"dy", dy}};
    if (c.op == "gelu") j["approximate"] = c.approximate;
    if (c.op == "dropout") {
      const std::vector<double> y = run_op<double>(c, x, dy).first;
      std::vector<int> mask(static_cast<size_t>(n));
      for (size_t i = 0; i < size_t(n); ++i) mask[i] = y[i] != 0.0;
      j["p"] = c.p;
      j["mask"] = mask;
    }
    cases.push_back(j);
  }
  testing::TempDir dir;
  const std::string in = dir.file("cases.json"), out = dir.file("torch.json");
  std::ofstream(in) << nlohmann::json{{"cases", cases}}.dump();
  const testing::ScriptResult script =
      testing::run_python_script("tests/engine/torch_gelu_tanh_dropout.py", "'" + in + "' '" + out + "'");
  ASSERT_EQ(script.status, 0) << script.output;
  std::ifstream f(out);
  const nlohmann::json torch = nlohmann::json::parse(f);

  for (const TorchCase& c : kCases) {
    SCOPED_TRACE(c.name);
    // The scale of each element's terms: |x| and |dy| (1 + |x|) for gelu, 1 and |dy| for
    // tanh (its values are at most 1), |x| and |dy| for dropout's products.
    std::vector<double> y_scale(static_cast<size_t>(n)), dx_scale(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i) {
      y_scale[i] = c.op == "tanh" ? 1.0 : std::abs(x[i]);
      dx_scale[i] = c.op == "gelu" ? std::abs(dy[i]) * (1 + std::abs(x[i])) : std::abs(dy[i]);
    }
    const auto [y64, dx64] = run_op<double>(c, x, dy);
    const auto [y32, dx32] = run_op<float>(c, x, dy);
    const nlohmann::json& t64 = torch.at(c.name).at("float64");
    const nlohmann::json& t32 = torch.at(c.name).at("float32");
    const double tolerance32 = c.op == "dropout" ? 0.0 : kFloat32Tolerance;
    const double tolerance64 = c.op == "dropout" ? 0.0 : kFloat64Tolerance;
    EXPECT_LE(error_of_scale(y64, t64.at("y").get<std::vector<double>>(), y_scale), tolerance64) << "float64 y";
    EXPECT_LE(error_of_scale(dx64, t64.at("dx").get<std::vector<double>>(), dx_scale), tolerance64) << "float64 dx";
    const std::vector<double> y32d(y32.begin(), y32.end()), dx32d(dx32.begin(), dx32.end());
    EXPECT_LE(error_of_scale(y32d, t32.at("y").get<std::vector<double>>(), y_scale), tolerance32) << "float32 y";
    EXPECT_LE(error_of_scale(dx32d, t32.at("dx").get<std::vector<double>>(), dx_scale), tolerance32) << "float32 dx";
    if (c.op == "dropout")
      for (size_t i = 0; i < size_t(n); ++i)
        ASSERT_EQ(y32[i] != 0.f, y64[i] != 0.0) << "the dtypes' masks differ at " << i;
  }
}

}  // namespace
}  // namespace dpcore
