// ops::embedding against torch.nn.functional.embedding run by Debian's PyTorch 1.13
// (tests/engine/torch_embedding.py), forward and backward, float32 and float64, on random
// ids with repeats, ids of one, two and three dimensions, and padding_idx (positive,
// negative, none). One Python process for every case.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "support/scatter_sum_bound.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

struct TorchEmbeddingCase {
  const char* name;
  Shape ids_shape;
  int64_t vocab, dim;
  std::optional<int64_t> padding_idx;
};

std::string case_arg(const TorchEmbeddingCase& c) {
  std::string shape;
  for (int64_t s : c.ids_shape) shape += (shape.empty() ? "" : "x") + std::to_string(s);
  return std::string(c.name) + ":" + shape + ":" + std::to_string(c.vocab) + ":" + std::to_string(c.dim) + ":" +
         (c.padding_idx ? std::to_string(*c.padding_idx) : "none");
}

// The forward copies table rows: exact on both sides. The backward sums each row's dy in
// some fixed order on each side: both lie within the scatter-add bound of the exact sum,
// so their difference within twice that bound (support/scatter_sum_bound.h, which already
// doubles the rounding term). In float64 that bound is below 1e-13 of the values here, well
// inside the 1e-10 relative the parity standard asks.
template <class T>
void expect_matches_torch(const TorchEmbeddingCase& c, const nlohmann::json& want, DType dtype) {
  const auto ids = want.at("ids").get<std::vector<int64_t>>();
  const auto weight = want.at("weight").get<std::vector<float>>();
  const auto dy = want.at("dy").get<std::vector<float>>();
  const nlohmann::json& out = want.at(dtype == DType::Float32 ? "float32" : "float64");
  Shape y_shape = c.ids_shape;
  y_shape.push_back(c.dim);
  Tensor w = Tensor::from_vector(std::vector<T>(weight.begin(), weight.end()), {c.vocab, c.dim});
  w.set_requires_grad(true);
  Tensor y = ops::embedding(Tensor::from_vector(ids, c.ids_shape), w, c.padding_idx);
  EXPECT_EQ(y.shape(), y_shape);
  EXPECT_EQ(y.to_vector<T>(), out.at("y").get<std::vector<T>>()) << "forward";
  const std::vector<T> dy_t(dy.begin(), dy.end());
  y.backward(Tensor::from_vector(dy_t, y_shape));
  const std::vector<T> got = w.grad().to_vector<T>(), torch = out.at("dweight").get<std::vector<T>>();
  std::vector<int64_t> counted_ids;  // the padding row's dy takes part in no sum
  std::vector<T> counted_dy;
  const int64_t padding = c.padding_idx ? (*c.padding_idx + c.vocab) % c.vocab : -1;
  for (size_t p = 0; p < ids.size(); ++p) {
    if (ids[p] == padding) continue;
    counted_ids.push_back(ids[p]);
    counted_dy.insert(counted_dy.end(), dy_t.begin() + p * c.dim, dy_t.begin() + (p + 1) * c.dim);
  }
  testing::expect_scatter_sum_within_bound(got, torch, c.vocab, c.dim, counted_ids, counted_dy);
  if (padding >= 0)
    for (int64_t d = 0; d < c.dim; ++d) EXPECT_EQ(got[padding * c.dim + d], T(0)) << "padding row";
}

TEST(EmbeddingTorch, ForwardAndBackwardMatchPyTorch) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  const std::vector<TorchEmbeddingCase> cases = {
      {"one_dim", {9}, 5, 4, std::nullopt},
      {"batch_by_time", {4, 16}, 11, 8, 0},
      {"negative_padding", {3, 5, 7}, 6, 3, -2},
      {"many_repeats", {2, 300}, 3, 5, std::nullopt},
      {"mostly_unused_rows", {20}, 200, 6, 199},
  };
  testing::TempDir dir;
  const std::string out = dir.file("torch_embedding.json");
  std::string args = "'" + out + "'";
  for (const auto& c : cases) args += " " + case_arg(c);
  const testing::ScriptResult script = testing::run_python_script("tests/engine/torch_embedding.py", args);
  ASSERT_EQ(script.status, 0) << script.output;
  std::ifstream f(out);
  const nlohmann::json torch = nlohmann::json::parse(f);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    expect_matches_torch<float>(c, torch.at(c.name), DType::Float32);
    expect_matches_torch<double>(c, torch.at(c.name), DType::Float64);
  }
}

}  // namespace
}  // namespace dpcore
