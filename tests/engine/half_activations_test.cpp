// The ops between autocast's 16-bit ops take 16-bit activations (docs/mixed-precision.md):
// elementwise ops, pooling, transpose, batch and layer norm hand on the input's 16-bit
// dtype, softmax, log-softmax and the losses hand on float32, as torch.autocast runs them.
// On the CPU and on the first CUDA device where there is one (the host build's emulated
// devices in CI), in bfloat16 and float16.
//
// The property that defines them: each result is the float32 op on the same values,
// rounded once to the 16-bit type (PyTorch computes its 16-bit elementwise ops and norms in
// float32 and rounds each output). So for 16-bit operands x (float32 leaves cast by
// ops::to) and a 16-bit gradient seed:
//   * the output has the expected dtype and equals round16(op32(x)), bit for bit;
//   * each leaf's gradient equals round16(the float32 op's gradient) (the cast's backward
//     rounds a float32 gradient; a 16-bit one is already rounded), bit for bit, and a
//     float32 parameter's gradient (a norm's weight and bias) equals the float32 op's;
// where op32 is the same op on float32 leaves holding the same values, and float32 itself
// is checked against float64 by the ops' own tests. One exception is stated by analysis:
// tanh's backward reads its stored 16-bit output y, so dx = dy (1 - y^2) moves by at most
// 2 |dy| y^2 u16 beyond the rounding of dx itself.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/memory_account.h"
#include "engine/ops.h"
#include "tests/support/error_of.h"
#include "tests/support/half_values.h"
#include "tests/support/test_devices.h"
#include "tests/support/test_support.h"

namespace dpcore {
namespace {

std::vector<float> host_values(const Tensor& t) {
  return ops::to(t.detach(), DType::Float32).to(Device::cpu()).to_vector<float>();
}

using testing::rounded_to;

struct HalfOpCase {
  std::string name;
  std::vector<Shape> shapes;       // the operands'
  std::vector<bool> activation;    // per operand: 16-bit (an activation) or float32 (a parameter)
  std::function<Tensor(const std::vector<Tensor>&)> op;
  bool float32_result = false;     // autocast's float32 list: the op widens and hands on float32
  bool tanh_backward = false;      // the backward reads the rounded output (the analysis above)
};

// A synchronised batch norm's group of one replica: its statistics and sums are its own,
// through the group's path (the allgathered statistics combined, the sums summed).
class GroupOfOne : public ops::BatchNormGroup {
 public:
  explicit GroupOfOne(int64_t rows) : rows_(rows) {}
  int size() const override { return 1; }
  int64_t rows() const override { return rows_; }
  void all_gather(const Tensor& in, Tensor& out) override { out.copy_(in); }
  void all_sum(Tensor&) override {}

 private:
  int64_t rows_;
};

// batch_norm2d on t[0] (weight t[1] and bias t[2] when given) with fresh running statistics.
Tensor batch_norm(const std::vector<Tensor>& t, bool training, ops::BatchNormGroup* group = nullptr) {
  const int64_t C = t[0].size(1);
  Tensor mean = Tensor::full({C}, 0.25, DType::Float32, t[0].device()),
         var = Tensor::full({C}, 1.5, DType::Float32, t[0].device());
  return t.size() == 3 ? ops::batch_norm2d(t[0], t[1], t[2], mean, var, training, 0.1, 1e-5, group)
                       : ops::batch_norm2d(t[0], Tensor(), Tensor(), mean, var, training, 0.1, 1e-5, group);
}

std::vector<HalfOpCase> cases() {
  const std::vector<bool> one = {true};
  const ops::Pool2dOptions pool;  // 2x2, stride 2
  return {
      {"relu", {{3, 17}}, one, [](const auto& t) { return ops::relu(t[0]); }},
      {"gelu", {{3, 17}}, one, [](const auto& t) { return ops::gelu(t[0]); }},
      {"gelu tanh", {{3, 17}}, one, [](const auto& t) { return ops::gelu(t[0], "tanh"); }},
      {"tanh", {{3, 17}}, one, [](const auto& t) { return ops::tanh(t[0]); }, false, true},
      {"dropout", {{4, 33}}, one, [](const auto& t) { return ops::dropout(t[0], {0.3, true, 5, 2, 8}); }},
      {"scale", {{3, 17}}, one, [](const auto& t) { return ops::scale(t[0], 1.0 / 3.0); }},
      {"add", {{3, 17}, {3, 17}}, {true, true}, [](const auto& t) { return ops::add(t[0], t[1]); }},
      {"add to float32", {{3, 17}, {3, 17}}, {true, false}, [](const auto& t) { return ops::add(t[0], t[1]); }, true},
      {"max_pool2d", {{2, 3, 6, 6}}, one, [pool](const auto& t) { return ops::max_pool2d(t[0], pool); }},
      {"avg_pool2d", {{2, 3, 6, 6}}, one, [pool](const auto& t) { return ops::avg_pool2d(t[0], pool); }},
      {"global_avg_pool2d", {{2, 3, 5, 5}}, one, [](const auto& t) { return ops::global_avg_pool2d(t[0]); }},
      {"transpose", {{2, 3, 4, 5}}, one, [](const auto& t) { return ops::transpose(t[0], 1, 2); }},
      {"reshape", {{2, 3, 4}}, one, [](const auto& t) { return ops::reshape(t[0], {6, 4}); }},
      {"batch_norm2d", {{3, 4, 5, 5}, {4}, {4}}, {true, false, false},
       [](const auto& t) { return batch_norm(t, true); }},
      {"batch_norm2d without affine", {{3, 4, 5, 5}}, one, [](const auto& t) { return batch_norm(t, true); }},
      {"batch_norm2d in eval mode", {{3, 4, 5, 5}, {4}, {4}}, {true, false, false},
       [](const auto& t) { return batch_norm(t, false); }},
      {"batch_norm2d synchronised", {{3, 4, 5, 5}, {4}, {4}}, {true, false, false},
       [](const auto& t) {
         static GroupOfOne group(3);  // the backward uses it too
         return batch_norm(t, true, &group);
       }},
      {"layer_norm", {{3, 5, 24}, {24}, {24}}, {true, false, false},
       [](const auto& t) { return ops::layer_norm(t[0], t[1], t[2]); }},
      {"softmax", {{3, 2, 9}}, one, [](const auto& t) { return ops::softmax(t[0]); }, true},
      {"log_softmax", {{6, 9}}, one, [](const auto& t) { return ops::log_softmax(t[0]); }, true},
      {"cross_entropy", {{6, 9}}, one,
       [](const auto& t) {
         return ops::cross_entropy(t[0], Tensor::from_vector(std::vector<int64_t>{0, 8, 3, 3, 5, 1}, {6})
                                             .to(t[0].device()));
       },
       true},
  };
}

// Tensors of more than 2^18 elements, which the ops' 16-bit kernels take in one call, on more
// than one thread (the CPU's shares of 2^14 elements, its widened pieces). On the CPU only:
// the CUDA kernels are the small cases' grid-stride loops; on the host build's emulated
// device these are thousands of emulated blocks, which a ThreadSanitizer process does not
// survive (its runtime crashes switching fibers after some thousands of them).
std::vector<HalfOpCase> cases_in_blocks() {
  const std::vector<bool> one = {true};
  const ops::Pool2dOptions pool;  // 2x2, stride 2
  return {
      {"gelu on threads", {{3, 90001}}, one, [](const auto& t) { return ops::gelu(t[0]); }},
      {"avg_pool2d on threads", {{37, 2, 64, 60}}, one, [pool](const auto& t) { return ops::avg_pool2d(t[0], pool); }},
      {"relu on threads", {{3, 90001}}, one, [](const auto& t) { return ops::relu(t[0]); }},
      {"dropout on threads", {{70, 4001}}, one, [](const auto& t) { return ops::dropout(t[0], {0.3, true, 5, 2, 8}); }},
      {"max_pool2d on threads", {{37, 2, 64, 60}}, one, [](const auto& t) { return ops::max_pool2d(t[0], {}); }},
      {"batch_norm2d on threads", {{40, 4, 40, 41}, {4}, {4}}, {true, false, false},
       [](const auto& t) { return batch_norm(t, true); }},
  };
}

struct OpRun {
  DType output_dtype;
  std::vector<float> y;
  std::vector<std::vector<float>> grads;
};

// The case on float32 leaves holding `values`; `half` set: the activations cast to it
// first (float32 leaves stay float32 otherwise). Backward from `seed` in the output's dtype.
OpRun run(const HalfOpCase& c, const std::vector<std::vector<float>>& values, const std::vector<float>& seed,
        std::optional<DType> half, Device device) {
  std::vector<Tensor> leaves, operands;
  for (size_t i = 0; i < values.size(); ++i) {
    leaves.push_back(Tensor::from_vector(values[i], c.shapes[i]).to(device));
    leaves.back().set_requires_grad(true);
    operands.push_back(half && c.activation[i] ? ops::to(leaves.back(), *half) : leaves.back());
  }
  const Tensor y = c.op(operands);
  OpRun r{y.dtype(), host_values(y), {}};
  y.backward(ops::to(Tensor::from_vector(seed, y.shape()), y.dtype()).to(device));
  for (const Tensor& l : leaves) r.grads.push_back(host_values(l.grad()));
  return r;
}

void expect_the_float32_op_rounded_once(const std::vector<HalfOpCase>& ops_cases, const std::vector<Device>& devices) {
  for (Device device : devices) {
    for (DType half : {DType::BFloat16, DType::Float16}) {
      for (const HalfOpCase& c : ops_cases) {
        SCOPED_TRACE(c.name + " on " + device.str() + " in " + dtype_name(half));
        // Operands with 16-bit values (parameters too, harmlessly), and a seed with 16-bit
        // values, so that both runs start from the same numbers.
        std::vector<std::vector<float>> values;
        for (size_t i = 0; i < c.shapes.size(); ++i)
          values.push_back(rounded_to(testing::random_vector<float>(size_t(shape_numel(c.shapes[i])), 40 + i, -3, 3),
                                      half));
        std::vector<Tensor> probe;
        for (size_t i = 0; i < c.shapes.size(); ++i) probe.push_back(Tensor::from_vector(values[i], c.shapes[i]));
        const std::vector<float> seed =
            rounded_to(testing::random_vector<float>(size_t(c.op(probe).numel()), 77), half);

        const OpRun low = run(c, values, seed, half, device), f32 = run(c, values, seed, std::nullopt, device);
        EXPECT_EQ(low.output_dtype, c.float32_result ? DType::Float32 : half);
        EXPECT_EQ(low.y, c.float32_result ? f32.y : rounded_to(f32.y, half)) << "the output";
        for (size_t i = 0; i < values.size(); ++i) {
          SCOPED_TRACE("gradient of operand " + std::to_string(i));
          const std::vector<float> expected = c.activation[i] ? rounded_to(f32.grads[i], half) : f32.grads[i];
          if (!c.tanh_backward) {
            EXPECT_EQ(low.grads[i], expected);
            continue;
          }
          const double u16 = testing::unit_roundoff(half);
          EXPECT_EQ(low.grads[i], rounded_to(low.grads[i], half)) << "not 16-bit values";
          size_t outside = 0;
          for (size_t e = 0; e < expected.size(); ++e) {
            const double y = f32.y[e], moved = 2 * std::fabs(double(seed[e])) * y * y * u16;
            const double bound = moved + u16 * std::fabs(double(f32.grads[i][e])) + 1e-30;
            outside += std::fabs(double(low.grads[i][e]) - f32.grads[i][e]) > bound;
          }
          EXPECT_EQ(outside, 0u) << "elements beyond the bound";
        }
      }
    }
  }
}

TEST(HalfActivations, EachOpIsTheFloat32OpRoundedOnce) {
  expect_the_float32_op_rounded_once(cases(), testing::cpu_and_first_cuda_device());
}

TEST(HalfActivations, LargeTensorsMeetAtTheBlockSeamsAndTheThreadShares) {
  expect_the_float32_op_rounded_once(cases_in_blocks(), {Device::cpu()});
}

// The ops with 16-bit kernels of their own (batch and layer norm, max and average pooling,
// dropout, gelu, tanh, scale) read and write the 16-bit tensors themselves: a training
// forward allocates its output and what it saves for the backward (per-channel or per-row
// statistics, the argmax), a backward the input's gradient (and the leaf's .grad cloned
// from it), and
// neither a float32 copy of an activation (a conversion in the op would widen the input and
// the gradient, 4 bytes an element each).
TEST(HalfActivations, NativeOpsMakeNoFloat32CopyOfTheActivations) {
  const Shape shape = {8, 16, 12, 12};
  const int64_t n = shape_numel(shape), C = shape[1];
  struct NativeCase {
    std::string name;
    std::function<Tensor(const Tensor& x, const Tensor& weight, const Tensor& bias)> op;
    size_t forward_bytes;  // besides the 16-bit output
  };
  const std::vector<NativeCase> native = {
      {"batch_norm2d", [](const Tensor& x, const Tensor& w, const Tensor& b) { return batch_norm({x, w, b}, true); },
       size_t(8 * 4 * C)},  // a few float32 [C] tensors
      {"max_pool2d", [](const Tensor& x, const Tensor&, const Tensor&) { return ops::max_pool2d(x, {}); },
       size_t(n / 4 * 4)},  // the int32 argmax of each output
      {"dropout", [](const Tensor& x, const Tensor&, const Tensor&) { return ops::dropout(x, {0.3, true, 5, 2, 8}); },
       size_t(0)},
      {"avg_pool2d", [](const Tensor& x, const Tensor&, const Tensor&) { return ops::avg_pool2d(x, {}); }, size_t(0)},
      {"global_avg_pool2d", [](const Tensor& x, const Tensor&, const Tensor&) { return ops::global_avg_pool2d(x); },
       size_t(0)},
      {"gelu", [](const Tensor& x, const Tensor&, const Tensor&) { return ops::gelu(x); }, size_t(0)},
      {"gelu (tanh form)", [](const Tensor& x, const Tensor&, const Tensor&) { return ops::gelu(x, "tanh"); },
       size_t(0)},
      {"tanh", [](const Tensor& x, const Tensor&, const Tensor&) { return ops::tanh(x); }, size_t(0)},
      {"scale", [](const Tensor& x, const Tensor&, const Tensor&) { return ops::scale(x, 0.3); }, size_t(0)},
      {"layer_norm",
       [](const Tensor& x, const Tensor&, const Tensor&) {
         const int64_t cols = x.size(3);  // weight and bias made here (no gradient): 2 x 12 floats
         return ops::layer_norm(x, Tensor::full({cols}, 1.5, DType::Float32, x.device()),
                                Tensor::zeros({cols}, DType::Float32, x.device()), 1e-5);
       },
       size_t(2 * 4 * (n / shape[3]) + 2 * 4 * shape[3])},  // float32 mean and rstd per row
  };
  for (Device device : testing::cpu_and_first_cuda_device()) {
    for (DType half : {DType::BFloat16, DType::Float16}) {
      for (const NativeCase& c : native) {
        SCOPED_TRACE(c.name + " on " + device.str() + " in " + dtype_name(half));
        Tensor x =
            ops::to(Tensor::from_vector(testing::random_vector<float>(size_t(n), 3, -2, 2), shape).to(device), half);
        x.set_requires_grad(true);
        Tensor weight = Tensor::full({C}, 1.5, DType::Float32, device), bias = Tensor::zeros({C}, DType::Float32, device);
        weight.set_requires_grad(true), bias.set_requires_grad(true);
        Tensor y;
        auto forward = std::make_shared<MemoryAccount>(), backward = std::make_shared<MemoryAccount>();
        {
          MemoryAccount::Scope scope(forward);
          y = c.op(x, weight, bias);
        }
        const Tensor seed =
            ops::to(Tensor::from_vector(testing::random_vector<float>(size_t(y.numel()), 4), y.shape()), half).to(device);
        {
          MemoryAccount::Scope scope(backward);
          y.backward(seed);
        }
        const size_t input_16bit = size_t(n) * 2, slack = 8 * 4 * size_t(C);
        EXPECT_LE(forward->peak_bytes(), size_t(y.numel()) * 2 + c.forward_bytes) << "the output and what it saves";
        EXPECT_LE(backward->peak_bytes(), 2 * input_16bit + slack) << "the input's gradient and its clone";
        EXPECT_EQ(x.grad().dtype(), half);
      }
    }
  }
}

// backward() given a seed of another dtype than its 16-bit root converts it to the root's
// dtype first, as PyTorch's engine converts every gradient to its tensor's dtype: the
// same gradients as the seed rounded by hand (the ops' 16-bit kernels take no float32
// gradient of a 16-bit output).
TEST(HalfActivations, ASeedIsConvertedToItsRootsDtypeAsInPyTorch) {
  for (Device device : testing::cpu_and_first_cuda_device()) {
    for (DType half : {DType::BFloat16, DType::Float16}) {
      SCOPED_TRACE(device.str() + " in " + dtype_name(half));
      const std::vector<float> values = testing::random_vector<float>(2 * 3 * 4 * 4, 5, -2, 2);
      const Tensor seed32 = Tensor::from_vector(testing::random_vector<float>(2 * 3 * 2 * 2, 6), {2, 3, 2, 2}).to(device);
      std::vector<std::vector<float>> grads;
      for (const Tensor& seed : {seed32, ops::to(seed32, half)}) {
        Tensor x = ops::to(Tensor::from_vector(values, {2, 3, 4, 4}).to(device), half);
        x.set_requires_grad(true);
        ops::max_pool2d(ops::relu(x), {}).backward(seed);
        grads.push_back(host_values(x.grad()));
      }
      EXPECT_EQ(grads[0], grads[1]);
    }
  }
}

TEST(HalfActivations, MixedDtypesAreRefusedOrPromotedAsInPyTorch) {
  const Tensor b16 = Tensor::zeros({2, 3}, DType::BFloat16), h16 = Tensor::zeros({2, 3}, DType::Float16);
  EXPECT_EQ(ops::add(b16, h16).dtype(), DType::Float32);  // bfloat16 + float16 promote to float32
  const Tensor f64 = Tensor::zeros({2, 3}, DType::Float64);
  EXPECT_EQ(testing::error_of([&] { ops::add(b16, f64); }), "add: mixed dtypes: " + b16.str() + " and " + f64.str());
  Tensor mean = Tensor::zeros({3}, DType::BFloat16), var = Tensor::zeros({3}, DType::Float32);
  EXPECT_EQ(testing::error_of([&] {
              ops::batch_norm2d(Tensor::zeros({2, 3, 2, 2}, DType::BFloat16), Tensor(), Tensor(), mean, var, true, 0.1,
                                1e-5);
            }),
            "batch_norm2d: running_mean " + mean.str() + " must be float32 for input bfloat16[2, 3, 2, 2] on cpu");
}

}  // namespace
}  // namespace dpcore
