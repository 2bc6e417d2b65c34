// ops::scaled_dot_product_attention against PyTorch (Debian's 1.13, the explicit formula
// with autograd: tests/engine/torch_attention.py) forward and backward, in float64 and
// float32; and its memory: beyond its inputs and outputs the op allocates O(T), one
// log-sum-exp per query row and, in backward, one D per row, where the explicit formula
// holds B * H * Tq * Tk probabilities (the table in docs/transformers.md).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/ops.h"
#include "support/kernel_checks.h"
#include "support/test_support.h"

namespace dpcore {
namespace {

struct TorchCase {
  std::string name;
  int64_t B, H, Tq, Tk, d;
  bool causal, padded;
  double scale;  // 0: the default 1 / sqrt(d)
  DType dtype;
};

template <class T>
Tensor tensor_of(const nlohmann::json& values, const Shape& shape, bool leaf) {
  Tensor t = Tensor::from_vector(values.get<std::vector<T>>(), shape);
  if (leaf) t.set_requires_grad(true);
  return t;
}

// The op on the script's inputs: o, dq, dk, dv, against the script's, as scaled_error (each
// element relative to max(|want|, rms(want))).
template <class T>
void expect_matches_torch(const TorchCase& c, const nlohmann::json& want, double tolerance) {
  const Shape q_shape{c.B, c.H, c.Tq, c.d}, kv_shape{c.B, c.H, c.Tk, c.d};
  Tensor q = tensor_of<T>(want.at("q"), q_shape, true), k = tensor_of<T>(want.at("k"), kv_shape, true),
         v = tensor_of<T>(want.at("v"), kv_shape, true);
  Tensor mask = c.padded ? tensor_of<T>(want.at("mask"), {c.B, c.Tk}, false) : Tensor();
  ops::AttentionOptions opt{c.causal, {}};
  if (c.scale != 0) opt.scale = c.scale;
  Tensor o = ops::scaled_dot_product_attention(q, k, v, mask, opt);
  o.backward(tensor_of<T>(want.at("dout"), q_shape, false));
  const std::pair<const char*, Tensor> results[] = {{"o", o}, {"dq", q.grad()}, {"dk", k.grad()}, {"dv", v.grad()}};
  for (const auto& [name, got] : results)
    EXPECT_LE(testing::scaled_error(got.template to_vector<T>(), want.at(name).template get<std::vector<T>>()), tolerance) << name;
}

TEST(ScaledDotProductAttention, MatchesTorchForwardAndBackward) {
  if (!testing::python_has_torch())
    GTEST_SKIP() << testing::kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  const std::vector<TorchCase> cases = {
      {"bert_padded", 2, 4, 16, 16, 16, false, true, 0, DType::Float64},
      {"causal_wide", 1, 2, 7, 12, 8, true, false, 0, DType::Float64},
      {"causal_tall_padded_scaled", 2, 1, 12, 7, 5, true, true, 0.3, DType::Float64},
      {"bert_padded_f32", 2, 4, 16, 16, 16, false, true, 0, DType::Float32},
      {"causal_padded_f32", 1, 2, 33, 70, 64, true, true, 0, DType::Float32},
  };
  testing::TempDir dir;
  const std::string out = dir.file("torch_attention.json");
  std::string args = "'" + out + "'";
  for (const TorchCase& c : cases)
    args += " " + c.name + ":" + std::to_string(c.B) + ":" + std::to_string(c.H) + ":" + std::to_string(c.Tq) + ":" +
            std::to_string(c.Tk) + ":" + std::to_string(c.d) + ":" + (c.causal ? "1" : "0") + ":" +
            (c.padded ? "1" : "0") + ":" + std::to_string(c.scale) + ":" +
            (c.dtype == DType::Float64 ? "float64" : "float32");
  const testing::ScriptResult script = testing::run_python_script("tests/engine/torch_attention.py", args);
  ASSERT_EQ(script.status, 0) << script.output;
  std::ifstream f(out);
  const nlohmann::json torch = nlohmann::json::parse(f);
  for (const TorchCase& c : cases) {
    SCOPED_TRACE(c.name);
    if (c.dtype == DType::Float64) {
      // Both sides are the same sums in double, in different orders: a few roundings of
      // 1e-16, amplified by no cancellation worse than the inputs' scale (worst measured 1.6e-15).
      expect_matches_torch<double>(c, torch.at(c.name), 1e-10);
    } else {
      // Float32: each side is within a few roundings per term of its d-term dot products
      // and Tk-term weighted sums of the exact result (PyTorch sums in float, dpcore in
      // double), so the two differ by at most (d + Tk) float ulps of the output's scale
      // (1.9e-6 and 8.0e-6 here; worst measured 6.1e-7 and 1.6e-6).
      expect_matches_torch<float>(c, torch.at(c.name), double(c.d + c.Tk) * std::ldexp(1.0, -24));
    }
  }
}

// The op's own allocations on the CPU at T = 128, 512 and 2048 (B = H = 1, d = 8: its extra
// memory does not depend on d, nor do the explicit formula's probabilities): the allocator's
// peak beyond the inputs and outputs is one row of T floats in the forward (lse) and one of
// T doubles in the backward (D), never the T x T probabilities. The backward runs through the backend,
// so that the autograd engine's handling of the gradients is not counted as the op's.
TEST(ScaledDotProductAttention, ExtraMemoryIsLinearInTheSequenceLength) {
  Backend& cpu = backend_for(Device::cpu());
  Allocator& allocator = cpu.allocator(0);
  std::printf("| T | extra bytes, forward + backward | explicit formula's probabilities (B*H*T*T*4 bytes) |\n");
  std::printf("|---|---|---|\n");
  for (int64_t T : {128, 512, 2048}) {
    const int64_t B = 1, H = 1, d = 8;
    const Shape shape{B, H, T, d};
    auto random = [&](uint64_t seed) { return Tensor::from_vector(testing::random_vector<float>(B * H * T * d, seed), shape); };
    Tensor q = random(1), k = random(2), v = random(3), dout = random(4);
    const size_t tensor_bytes = size_t(B * H * T * d) * sizeof(float), row_bytes = size_t(B * H * T) * sizeof(float);

    size_t before = allocator.bytes_in_use();
    allocator.reset_peak();
    Tensor o = ops::scaled_dot_product_attention(q, k, v, Tensor(), {true, {}});
    const size_t forward_extra = allocator.peak_bytes() - before - tensor_bytes;  // beyond o

    kernels::AttentionShape s;
    s.B = B, s.H = H, s.Tq = s.Tk = T, s.d = d, s.scale = 1.0 / std::sqrt(double(d)), s.causal = true;
    Tensor lse = Tensor::empty({B, H, T}), dq = Tensor::empty(shape), dk = Tensor::empty(shape),
           dv = Tensor::empty(shape);
    cpu.attention_forward(s, q, k, v, Tensor(), o, lse);
    before = allocator.bytes_in_use();
    allocator.reset_peak();
    cpu.attention_backward(s, q, k, v, Tensor(), o, lse, dout, dq, dk, dv);
    const size_t backward_extra = allocator.peak_bytes() - before;

    EXPECT_EQ(forward_extra, row_bytes) << "T = " << T << ": the forward may keep only lse";
    EXPECT_EQ(backward_extra, 2 * row_bytes) << "T = " << T << ": the backward may allocate only D, in double";
    std::printf("| %lld | %zu | %lld |\n", static_cast<long long>(T), forward_extra + backward_extra,
                static_cast<long long>(B * H * T * T * 4));
  }
}

}  // namespace
}  // namespace dpcore
