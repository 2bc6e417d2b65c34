// A file written by dpcore loads into the PyTorch model (load_state_dict(strict=True)) and
// reproduces the fixture's logits there: checked by `scripts/make_fixtures.py --check-load`
// with Debian's /usr/bin/python3 and its python3-torch.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <functional>
#include <fstream>
#include <sstream>

#include "engine/io/safetensors.h"
#include "support/fixture_weights.h"
#include "support/test_support.h"

namespace dpcore::io {
namespace {

using namespace dpcore::testing;

class PyTorchLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!python_has_torch()) GTEST_SKIP() << kTorchPython << " cannot import torch (scripts/install-deps.sh installs python3-torch)";
  }

  // Runs the check on a file; returns its exit status and keeps its output for messages.
  int check_load(const std::string& file, const std::string& model) {
    ScriptResult r = run_python_script("scripts/make_fixtures.py", "--check-load '" + file + "' " + model);
    output = r.output;
    return r.status;
  }

  // simplenet's weights at the fixture initialisation plus the fixture's input and logits,
  // written by dpcore; `edit` may change the tensor list before saving.
  std::string write_simplenet(const std::function<void(std::vector<TensorView>&)>& edit = nullptr) {
    SafetensorsFile fixture = load_safetensors(source_dir() + "/tests/fixtures/simplenet.safetensors");
    kept = {fixture.at("input"), fixture.at("logits")};
    for (size_t t = 0; t < model.params.size(); ++t)
      views.push_back(TensorView{model.params[t].name, DType::Float32, model.params[t].shape, init[t].data(),
                                 init[t].size() * sizeof(float)});
    for (const TensorRecord& r : kept) views.push_back(TensorView{r.name, r.dtype, r.shape, r.data.data(), r.data.size()});
    if (edit) edit(views);
    const std::string path = dir.file("simplenet.safetensors");
    save_safetensors(path, views, {{"written_by", "dpcore"}});
    return path;
  }

  TempDir dir;
  FixtureModel model = fixture_model("simplenet");
  std::vector<std::vector<float>> init = fixture_initial_params(model);
  std::vector<TensorView> views;
  std::vector<TensorRecord> kept;
  std::string output;
};

TEST_F(PyTorchLoad, DpcoreFileLoadsStrictlyAndReproducesTheLogits) {
  EXPECT_EQ(check_load(write_simplenet(), "simplenet"), 0) << output;
  EXPECT_NE(output.find("matches logits"), std::string::npos) << output;
}

TEST_F(PyTorchLoad, WrongShapeIsRejected) {
  // fc.weight transposed: same bytes, shape [4096, 10] instead of [10, 4096].
  std::string path = write_simplenet([](std::vector<TensorView>& v) { v[2].shape = {4096, 10}; });
  EXPECT_NE(check_load(path, "simplenet"), 0) << output;
  EXPECT_NE(output.find("'fc.weight' is F32 [4096, 10], simplenet needs F32 [10, 4096]"), std::string::npos) << output;
}

TEST_F(PyTorchLoad, MissingParameterIsRejected) {
  std::string path = write_simplenet([](std::vector<TensorView>& v) { v.erase(v.begin() + 1); });
  EXPECT_NE(check_load(path, "simplenet"), 0) << output;
  EXPECT_NE(output.find("missing ['conv.bias']"), std::string::npos) << output;
}

TEST_F(PyTorchLoad, ChangedWeightsDoNotReproduceTheLogits) {
  // The bias of class 0 shifted by 0.01: loading succeeds, the outputs no longer match.
  std::string path = write_simplenet([this](std::vector<TensorView>&) { init[3][0] += 0.01f; });
  EXPECT_NE(check_load(path, "simplenet"), 0) << output;
  EXPECT_NE(output.find("differs from the file's logits"), std::string::npos) << output;
}

TEST_F(PyTorchLoad, WrongModelIsRejected) {
  EXPECT_NE(check_load(write_simplenet(), "vggs"), 0) << output;
  EXPECT_NE(output.find("does not match vggs's state_dict"), std::string::npos) << output;
}

}  // namespace
}  // namespace dpcore::io
