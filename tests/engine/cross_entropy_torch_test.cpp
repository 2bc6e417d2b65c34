// ops::cross_entropy over tokens ([..., C] logits, classes last) against
// torch.nn.functional.cross_entropy run by Debian's PyTorch 1.13
// (tests/engine/torch_cross_entropy.py) on the same logits viewed as [-1, C]: the loss and
// d(loss)/d(logits), float32 and float64, with ignore_index (PyTorch's -100 and a real
// class), the mean over counted tokens and the sum, and every token ignored (NaN mean).
// One Python process for every case.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

struct TorchCrossEntropyCase {
  const char* name;
  Shape logits_shape;
  int64_t ignore_index;
  ops::Reduction reduction;
  int ignored_every;  // every k-th token set to ignore_index (0: none)
};

std::string case_arg(const TorchCrossEntropyCase& c) {
  std::string shape;
  for (int64_t s : c.logits_shape) shape += (shape.empty() ? "" : "x") + std::to_string(s);
  return std::string(c.name) + ":" + shape + ":" + std::to_string(c.ignore_index) + ":" +
         (c.reduction == ops::Reduction::Mean ? "mean" : "sum") + ":" + std::to_string(c.ignored_every);
}

// max |got - want| / max |want| (or max |got - want| when want is all zeros).
template <class T>
double scaled_difference(const std::vector<T>& got, const std::vector<T>& want) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// float64: both sides compute in double; 1e-10 relative is the parity standard (the
// differences are ~1e-15). float32: PyTorch's log_softmax rounds in float (a sum of C
// exps and a log per row, then a float sum over M tokens): at most about (M + C + 4) u of
// the loss with M <= 64 tokens and C <= 11 classes here, 79 * 6e-8 < 5e-6; dpcore rounds
// once from double. The gradient's elements (softmax - onehot, over the count) carry a few
// tens of u of the largest one. 1e-5 covers both.
template <class T>
void expect_matches_torch(const TorchCrossEntropyCase& c, const nlohmann::json& want, DType dtype, double tolerance) {
  const auto logits = want.at("logits").get<std::vector<float>>();
  const auto target = want.at("target").get<std::vector<int64_t>>();
  const nlohmann::json& out = want.at(dtype == DType::Float32 ? "float32" : "float64");
  const Shape target_shape(c.logits_shape.begin(), c.logits_shape.end() - 1);
  Tensor x = Tensor::from_vector(std::vector<T>(logits.begin(), logits.end()), c.logits_shape);
  x.set_requires_grad(true);
  const Tensor t = Tensor::from_vector(target, target_shape);
  Tensor loss = ops::cross_entropy(x, t, c.reduction, c.ignore_index);
  loss.backward();
  const double got_loss = double(loss.to_vector<T>()[0]);
  if (out.at("loss").is_null()) {
    EXPECT_TRUE(std::isnan(got_loss)) << "PyTorch's loss is NaN, ours " << got_loss;
  } else {
    const double want_loss = out.at("loss").get<double>();
    EXPECT_NEAR(got_loss, want_loss, tolerance * std::abs(want_loss)) << "loss";
  }
  EXPECT_LE(scaled_difference(x.grad().to_vector<T>(), out.at("dlogits").get<std::vector<T>>()), tolerance)
      << "dlogits";
  // The count the mean divided by: the tokens that are not ignore_index.
  const int64_t counted = int64_t(target.size()) - int64_t(std::count(target.begin(), target.end(), c.ignore_index));
  EXPECT_EQ(ops::cross_entropy_count(t, c.ignore_index).template to_vector<int64_t>()[0], counted);
}

TEST(CrossEntropyTorch, TokensWithIgnoreIndexMatchPyTorch) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  const std::vector<TorchCrossEntropyCase> cases = {
      {"tokens_mean", {4, 16, 11}, -100, ops::Reduction::Mean, 5},
      {"tokens_sum", {2, 8, 7}, -100, ops::Reduction::Sum, 3},
      {"a_class_ignored", {3, 5, 6}, 2, ops::Reduction::Mean, 0},
      {"rows_none_ignored", {16, 10}, -100, ops::Reduction::Mean, 0},
      {"all_ignored_mean", {2, 3, 4}, -100, ops::Reduction::Mean, 1},
      {"all_ignored_sum", {2, 3, 4}, -100, ops::Reduction::Sum, 1},
  };
  testing::TempDir dir;
  const std::string out = dir.file("torch_cross_entropy.json");
  std::string args = "'" + out + "'";
  for (const auto& c : cases) args += " " + case_arg(c);
  const testing::ScriptResult script = testing::run_python_script("tests/engine/torch_cross_entropy.py", args);
  ASSERT_EQ(script.status, 0) << script.output;
  std::ifstream f(out);
  const nlohmann::json torch = nlohmann::json::parse(f);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_matches_torch<float>(c, torch.at(c.name), DType::Float32, 1e-5);
    expect_matches_torch<double>(c, torch.at(c.name), DType::Float64, 1e-10);
  }
}

}  // namespace
}  // namespace dpcore
