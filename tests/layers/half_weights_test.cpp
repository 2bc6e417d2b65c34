// bfloat16 and float16 weights as PyTorch writes them (a model after .bfloat16() / .half(),
// tests/layers/torch_half_weights.py with Debian's PyTorch 1.13) load into a float32 model
// only when the conversion is asked for: without it the first 16-bit tensor is refused by
// name and dtype; with it every parameter and running statistic holds exactly PyTorch's
// rounded value, the batch counts stay int64, and the log names how many tensors were
// converted from which dtype.
#include <gtest/gtest.h>

#include <memory>

#include "kernels/half_types.h"
#include "layers/weights.h"
#include "layers/zoo.h"
#include "support/error_of.h"
#include "support/test_support.h"

namespace dpcore::layers {
namespace {

using namespace dpcore::testing;

std::unique_ptr<Model> resnet8(uint64_t seed) {
  ModelDef def = reference_model("resnet8", {1, 28, 28});
  return std::make_unique<Model>(std::move(def.net), def.input_shape, Device::cpu(), DType::Float32, seed);
}

// Random running statistics (so that buffers are checked too) and batch counts of 3.
void set_buffers(Model& m) {
  std::vector<float> values = random_vector<float>(size_t(m.buffers().total()), 5, 0.5, 2.0);
  for (const auto& e : m.buffers().entries())
    if (e.counter) std::fill_n(values.begin() + e.offset, e.numel, 3.0f);
  m.buffers().values().copy_(Tensor::from_vector(values, m.buffers().values().shape()));
}

struct HalfFile {
  const char* dtype;
  float (*round)(float);  // float32 -> the 16-bit type -> float32
};

TEST(HalfWeights, LoadOnlyWhenConvertedExplicitly) {
  if (!python_has_torch()) GTEST_SKIP() << kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  auto source = resnet8(3);
  set_buffers(*source);
  TempDir dir;
  const std::string f32 = dir.file("f32.safetensors"), bf16 = dir.file("bf16.safetensors"),
                    f16 = dir.file("f16.safetensors");
  save_weights(*source, f32);
  const ScriptResult script =
      run_python_script("tests/layers/torch_half_weights.py", "'" + f32 + "' '" + bf16 + "' '" + f16 + "'");
  ASSERT_EQ(script.status, 0) << script.output;

  int64_t floating = int64_t(source->parameters().entries().size());
  for (const auto& e : source->buffers().entries()) floating += e.counter ? 0 : 1;
  const std::string first = source->parameters().entries().front().name;
  const std::vector<float> params = source->parameters().values().to_vector<float>(),
                           buffers = source->buffers().values().to_vector<float>();
  const HalfFile files[] = {
      {"bfloat16", [](float x) { return kernels::bfloat16_to_float(kernels::float_to_bfloat16(x)); }},
      {"float16", [](float x) { return kernels::float16_to_float(kernels::float_to_float16(x)); }}};
  for (const HalfFile& file : files) {
    SCOPED_TRACE(file.dtype);
    const std::string& path = file.dtype == std::string("bfloat16") ? bf16 : f16;
    auto target = resnet8(4);
    const std::string refused = error_of([&] { load_weights(*target, path); });
    EXPECT_NE(refused.find(path + ": tensor '" + first + "' is " + file.dtype), std::string::npos) << refused;
    EXPECT_NE(refused.find("--convert-weights"), std::string::npos) << refused;

    const WeightsConverted converted = load_weights(*target, path, {true});
    EXPECT_EQ(conversion_log(converted, target->dtype()),
              "converted " + std::to_string(floating) + " tensors from " + file.dtype + " to float32\n");
    const std::vector<float> got = target->parameters().values().to_vector<float>(),
                             got_buffers = target->buffers().values().to_vector<float>();
    for (const auto& e : source->parameters().entries())
      for (int64_t i = e.offset; i < e.offset + e.numel; ++i)
        ASSERT_EQ(got[size_t(i)], file.round(params[size_t(i)])) << e.name << " element " << i - e.offset;
    for (const auto& e : source->buffers().entries())
      for (int64_t i = e.offset; i < e.offset + e.numel; ++i)
        ASSERT_EQ(got_buffers[size_t(i)], e.counter ? 3.0f : file.round(buffers[size_t(i)])) << e.name;
  }
}

TEST(HalfWeights, ConversionLogNamesEachDtype) {
  EXPECT_EQ(conversion_log({}, DType::Float32), "");
  EXPECT_EQ(conversion_log({1, 2}, DType::Float64),
            "converted 1 tensor from bfloat16 to float64\nconverted 2 tensors from float16 to float64\n");
}

}  // namespace
}  // namespace dpcore::layers
