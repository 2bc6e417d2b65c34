// Gradient accumulation: A micro-batches then one step must equal one step on the whole
// batch, whatever A and however uneven the micro-batches.
#include <gtest/gtest.h>

#include "engine/sgd.h"
#include "train/step/step.h"
#include "layers/zoo.h"
#include "support/test_support.h"

namespace dpcore::train {

using namespace dpcore::layers;

namespace {

struct Trainee {
  std::unique_ptr<Model> model;
  std::unique_ptr<Sgd> sgd;
  Tensor x, y;
};

Trainee make(int64_t batch) {
  ModelDef def = reference_model("simplenet");
  Trainee s;
  s.model = std::make_unique<Model>(std::move(def.net), def.input_shape, Device::cpu(), DType::Float64, 3);
  s.sgd = std::make_unique<Sgd>(s.model->parameters(), SgdConfig{0.1, 0.9, 0.0, 0.01, true});
  s.x = Tensor::from_vector(testing::random_vector<double>(size_t(batch * 3 * 32 * 32), 4), {batch, 3, 32, 32});
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < batch; ++i) labels.push_back((i * 7) % 10);
  s.y = Tensor::from_vector(labels, {batch});
  return s;
}

std::vector<double> train(int64_t batch, int64_t accum, int steps) {
  Trainee s = make(batch);
  for (int i = 0; i < steps; ++i) train_step(*s.model, *s.sgd, s.x, s.y, accum);
  return s.model->parameters().values().to_vector<double>();
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

TEST(Accumulation, EqualsOneStepOnTheWholeBatch) {
  auto whole = train(7, 1, 3);
  for (int64_t accum : {2, 3, 7}) {  // 7 = 3+2+2 and 3+... uneven micro-batches included
    EXPECT_LT(max_abs_diff(train(7, accum, 3), whole), 1e-12) << "accum " << accum;
  }
}

TEST(Accumulation, ZeroingInsideTheLoopWouldBeCaught) {
  // The article's bug, written out: zero the gradients on every micro-batch. The result
  // must differ clearly from the correct one, so the test above would catch it.
  Trainee s = make(6);
  int64_t begin = 0;
  for (int64_t size : even_split(6, 3)) {
    s.model->zero_grad();  // the bug
    forward_backward(*s.model, s.x.narrow0(begin, begin + size), s.y.narrow0(begin, begin + size), 1.0 / 6);
    begin += size;
  }
  s.sgd->step();
  auto buggy = s.model->parameters().values().to_vector<double>();
  EXPECT_GT(max_abs_diff(buggy, train(6, 1, 1)), 1e-4);
}

TEST(Accumulation, EvenSplit) {
  EXPECT_EQ(even_split(7, 3), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(even_split(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_THROW(even_split(5, 0), Error);
}

TEST(Accumulation, MoreMicroBatchesThanSamplesIsAnError) {
  Trainee s = make(2);
  EXPECT_THROW(train_step(*s.model, *s.sgd, s.x, s.y, 3), Error);
}

}  // namespace
}  // namespace dpcore::train
