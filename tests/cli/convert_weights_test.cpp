// `--init` (and `--init-from`) with bfloat16 weights (written by PyTorch 1.13, tests/layers/torch_half_weights.py):
// `dpcore eval` and `dpcore train` refuse them naming the tensor and the flag, and with
// --convert-weights load them and log what they converted.
#include <gtest/gtest.h>

#include "cli/cli_run.h"
#include "support/test_support.h"

namespace dpcore::testing {
namespace {

const std::string kModel = "--model \"conv(4,3,p1) relu pool(2) flatten linear(4)\" --data synthetic:1,8,8,4,64 --device cpu";

TEST(ConvertWeights, Bfloat16InitNeedsTheFlagAndIsLogged) {
  if (!python_has_torch()) GTEST_SKIP() << kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  TempDir dir;
  const std::string f32 = dir.file("w.safetensors"), bf16 = dir.file("b.safetensors"), f16 = dir.file("h.safetensors");
  CommandResult r = run("train " + kModel + " --steps 1 --batch 16 --save " + f32);
  ASSERT_EQ(r.status, 0) << r.output;
  const ScriptResult script =
      run_python_script("tests/layers/torch_half_weights.py", "'" + f32 + "' '" + bf16 + "' '" + f16 + "'");
  ASSERT_EQ(script.status, 0) << script.output;

  r = run("eval " + kModel + " --init " + bf16);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("tensor '0.weight' is bfloat16"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--convert-weights"), std::string::npos) << r.output;

  // Two convolution and two linear tensors.
  r = run("eval " + kModel + " --init " + bf16 + " --convert-weights");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("converted 4 tensors from bfloat16 to float32\n"), std::string::npos) << r.output;
  r = run("train " + kModel + " --steps 1 --batch 16 --init " + f16 + " --convert-weights");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("converted 4 tensors from float16 to float32\n"), std::string::npos) << r.output;
  r = run("train " + kModel + " --steps 1 --batch 16 --init-from " + bf16);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("tensor '0.weight' is bfloat16"), std::string::npos) << r.output;
  r = run("train " + kModel + " --steps 1 --batch 16 --init-from " + bf16 + " --convert-weights");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("loaded 4 of the 4 tensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("converted 4 tensors from bfloat16 to float32\n"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dpcore::testing
