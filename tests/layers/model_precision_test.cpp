// Model::set_precision (--precision bf16, docs/mixed-precision.md): a training forward runs
// under autocast and takes its convolutions' and linear layers' parameters from the model's
// one 16-bit copy, refreshed by zero_grad(), while the master weights, their gradients and
// the optimizer state stay float32.
//
// The reference is the same network in float32 run under an AutocastScope by hand, whose
// ops then cast each float32 parameter themselves: the copy holds the same bits, so the
// outputs and the float32 gradients agree bit for bit, and they stop agreeing when the
// master weights change without a refresh (the copy is really what the forward reads);
// evaluation (no graph recorded) casts the current weights in each op, never a stale copy.
// Over the reference models' parts: convolutions fused with relu and pooling, batch norm,
// residual blocks, transformer encoder layers (their in projection cast in the op), and
// BERT with attention, layer norm and a decoder tied to the word embedding.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/autocast.h"
#include "engine/autograd.h"
#include "engine/memory_account.h"
#include "engine/ops.h"
#include "layers/zoo.h"
#include "tests/support/test_devices.h"
#include "tests/support/test_support.h"

namespace dpcore::layers {
namespace {

struct NetCase {
  std::string name;
  std::function<ModelDef()> make;
  bool token_ids = false;
  bool on_cuda = true;  // also on the first CUDA device (the small ones: the emulated devices are slow)
};

std::vector<NetCase> nets() {
  auto spec = [](std::string text, Shape shape) {
    return [text, shape] { return ModelDef{parse_layer_spec(text, shape), shape}; };
  };
  return {
      {"fashioncnn", [] { return reference_model("fashioncnn"); }, false, false},
      {"conv bn res", spec("conv(8,3,p1,nobias) bn relu res(8) res(16,s2) gap flatten linear(5)", {3, 8, 8})},
      {"encoders", spec("encoder(heads=2,ff=16,dropout=0) encoder(heads=2,ff=16,dropout=0,gelu) meanpool linear(5)",
                        {6, 8}),
       false, false},
      {"bert-tiny-mlm", [] { return reference_model("bert-tiny-mlm", {12}, 10, 40); }, true, false},
  };
}

Model build(const NetCase& c, Device device) {
  ModelDef def = c.make();
  return Model(std::move(def.net), def.input_shape, device, DType::Float32, 5);
}

Tensor input_for(const Model& m, Device device) {
  Shape shape{3};
  shape.insert(shape.end(), m.input_shape().begin(), m.input_shape().end());
  const int64_t n = shape_numel(shape);
  if (m.takes_token_ids()) {
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = (i * 7 + 3) % 40;
    return Tensor::from_vector(ids, shape).to(device);
  }
  return Tensor::from_vector(testing::random_vector<float>(size_t(n), 11), shape).to(device);
}

struct Pass {
  std::vector<float> output, grads;
};

// forward (under `scope` when given) and backward from a fixed seed; zero_grad first.
Pass train_pass(Model& m, const Tensor& x, std::optional<DType> scope) {
  m.zero_grad();
  Tensor y;
  {
    std::optional<AutocastScope> autocast;
    if (scope) autocast.emplace(*scope);
    y = m.forward(x);
  }
  y.backward(Tensor::from_vector(testing::random_vector<float>(size_t(y.numel()), 3), y.shape()).to(x.device()));
  return {y.to(Device::cpu()).to_vector<float>(), m.parameters().grads().to(Device::cpu()).to_vector<float>()};
}

std::vector<float> eval_output(Model& m, const Tensor& x, std::optional<DType> scope) {
  autograd::NoGradGuard no_grad;
  std::optional<AutocastScope> autocast;
  if (scope) autocast.emplace(*scope);
  return m.forward(x).to(Device::cpu()).to_vector<float>();
}

// Every master weight times 1.5 (every 16-bit value changes), without a refresh.
void change_master_weights(Model& m) {
  Tensor v = m.parameters().values();
  v.copy_(ops::scale(v, 1.5));
}

TEST(ModelPrecision, ATrainingForwardReadsTheCopyAndEqualsCastingInEachOp) {
  for (Device device : testing::cpu_and_first_cuda_device()) {
    for (const NetCase& c : nets()) {
      if (device.is_cuda() && !c.on_cuda) continue;
      for (DType half : {DType::BFloat16, DType::Float16}) {
        SCOPED_TRACE(c.name + " on " + device.str() + " in " + dtype_name(half));
        Model copy = build(c, device), by_op = build(c, device);
        copy.set_precision(half);
        ASSERT_EQ(copy.precision(), half);
        ASSERT_NE(copy.low_precision_parameters(), nullptr);
        EXPECT_EQ(copy.parameters().grads().dtype(), DType::Float32);
        const Tensor x = input_for(copy, device);

        const Pass a = train_pass(copy, x, std::nullopt), b = train_pass(by_op, x, half);
        EXPECT_EQ(a.output, b.output);
        EXPECT_EQ(a.grads, b.grads);
        EXPECT_NE(a.output, train_pass(by_op, x, std::nullopt).output) << "the forward did not compute in 16 bits";

        // New master weights: the copy is stale until zero_grad refreshes it (a training
        // forward right after the change, without zero_grad, reads the old copy).
        change_master_weights(copy);
        change_master_weights(by_op);
        const Tensor stale = copy.forward(x);
        EXPECT_NE(stale.to(Device::cpu()).to_vector<float>(), eval_output(by_op, x, half))
            << "the training forward did not read the copy";
        // Evaluation casts the current weights in each op, stale copy or not.
        EXPECT_EQ(eval_output(copy, x, std::nullopt), eval_output(by_op, x, half));
        const Pass a2 = train_pass(copy, x, std::nullopt), b2 = train_pass(by_op, x, half);  // zero_grad: refreshed
        EXPECT_EQ(a2.output, b2.output);
        EXPECT_EQ(a2.grads, b2.grads);
      }
    }
  }
}

// A pipeline runs the model as layer ranges, one after another, each stage taking what
// the one below handed on (train/pipeline): forward_layers over consecutive ranges, the
// next taking the previous one's output as a leaf of its own graph whose gradient goes
// back, gives forward()'s output and float32 gradients bit for bit in every precision, the
// ranges' outputs have the dtypes layer_output_dtypes says (16-bit after an autocast op,
// float32 after a transformer layer's residual sum and where forward() and
// forward_logits() end), and finding those dtypes moves
// nothing: the mode, the parameters and batch norm's running statistics are as they were.
TEST(ModelPrecision, LayerRangesOneAfterAnotherAreForwardBitForBit) {
  for (const NetCase& c : nets()) {
    for (DType precision : {DType::Float32, DType::BFloat16, DType::Float16}) {
      SCOPED_TRACE(c.name + " in " + dtype_name(precision));
      Model whole = build(c, Device::cpu()), ranges = build(c, Device::cpu());
      whole.set_precision(precision);
      ranges.set_precision(precision);
      const Tensor x = input_for(whole, Device::cpu());
      const std::vector<float> buffers_before = ranges.buffers().values().to_vector<float>();
      const std::vector<DType>& dtypes = ranges.layer_output_dtypes(x.dtype());
      ASSERT_EQ(dtypes.size(), ranges.net().size());
      EXPECT_TRUE(ranges.is_training());
      EXPECT_EQ(ranges.buffers().values().to_vector<float>(), buffers_before);
      EXPECT_EQ(dtypes.back(), DType::Float32);  // the output leaves in float32
      // The convolutional nets hand on 16 bits between layers; a transformer layer's
      // residual sum (float32 input + 16-bit projection) is float32, as under torch.autocast.
      const bool convolutional = c.name == "fashioncnn" || c.name == "conv bn res";
      if (precision != DType::Float32 && convolutional)
        EXPECT_NE(std::count(dtypes.begin(), dtypes.end(), precision), 0) << "no layer handed on 16 bits";

      const Pass want = train_pass(whole, x, std::nullopt);
      // Ranges of one and two layers in turn; each range's input a leaf of its own.
      ranges.zero_grad();
      const size_t layers = ranges.net().size();
      std::vector<Tensor> inputs, outputs;
      Tensor t = x;
      for (size_t first = 0, width = 1; first < layers; first += width, width = 3 - width) {
        const size_t end = std::min(layers, first + width);
        Tensor in = t.detach();
        if (first > 0) in.set_requires_grad(true);
        Tensor out = ranges.forward_layers(in, first, end);
        EXPECT_EQ(out.dtype(), dtypes[end - 1]) << "layers " << first << " to " << end;
        inputs.push_back(in), outputs.push_back(out);
        t = out;
      }
      const Tensor y = outputs.back();
      EXPECT_EQ(y.to_vector<float>(), want.output);
      Tensor grad = Tensor::from_vector(testing::random_vector<float>(size_t(y.numel()), 3), y.shape());
      for (size_t i = outputs.size(); i-- > 0;) {
        if (outputs[i].requires_grad()) outputs[i].backward(grad);
        grad = inputs[i].grad();
      }
      EXPECT_EQ(ranges.parameters().grads().to_vector<float>(), want.grads);
    }
  }
}

// The activations a training forward keeps for its backward are 16-bit under a 16-bit
// precision, as under torch.autocast: the bytes the graph holds after the forward (the
// tensors allocated during it and still alive; the parameters and their 16-bit copy come
// before) are about half float32's. Not exactly half: the batch norms' statistics stay
// float32, and the first convolution keeps a 16-bit copy of the float32 input, which a
// float32 forward keeps as the caller's tensor itself.
TEST(ModelPrecision, ATrainingForwardKeepsItsActivationsInSixteenBits) {
  auto held_after_forward = [](DType precision) {
    const Shape input_shape{3, 16, 16};
    Model m(parse_layer_spec("conv(16,3,p1,nobias) bn relu res(16) res(32,s2) gap flatten linear(10)", input_shape),
            input_shape, Device::cpu(), DType::Float32, 5);
    m.set_precision(precision);
    m.zero_grad();
    const Tensor x = Tensor::from_vector(testing::random_vector<float>(8 * 3 * 16 * 16, 3), {8, 3, 16, 16});
    auto account = std::make_shared<MemoryAccount>();
    MemoryAccount::Scope scope(account);
    const Tensor y = m.forward(x);
    return account->bytes_in_use();
  };
  const size_t float32_bytes = held_after_forward(DType::Float32);
  for (DType half : {DType::BFloat16, DType::Float16}) {
    const size_t half_bytes = held_after_forward(half);
    EXPECT_LE(double(half_bytes), 0.55 * double(float32_bytes))
        << dtype_name(half) << ": " << half_bytes << " bytes against float32's " << float32_bytes;
  }
}

TEST(ModelPrecision, ReplicasKeepItAndOnlyFloat32MasterWeightsTakeIt) {
  Model m = build(nets()[1], Device::cpu());
  m.set_precision(DType::BFloat16);
  EXPECT_EQ(m.replicate(Device::cpu())->precision(), DType::BFloat16);
  m.set_precision(DType::Float32);
  EXPECT_EQ(m.low_precision_parameters(), nullptr);

  ModelDef def = nets()[1].make();
  Model doubles(std::move(def.net), def.input_shape, Device::cpu(), DType::Float64, 5);
  try {
    doubles.set_precision(DType::BFloat16);
    FAIL() << "a float64 model took bfloat16";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
  try {
    m.set_precision(DType::Int64);
    FAIL() << "int64 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("int64"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpcore::layers
