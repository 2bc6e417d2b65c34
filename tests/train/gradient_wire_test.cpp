// --grad-dtype bf16 (train/step/gradient_wire.h): dp's and ddp's gradient allreduce moves
// bfloat16 while the gradients stay float32. With 2 replicas every element of the reduced
// gradient is ONE 16-bit sum, whatever the buckets, so it can be written down exactly:
//   bf16(float(bf16(g0)) + float(bf16(g1)))
// where g0 and g1 are the float32 gradients of the two halves of the batch on one device.
// The trace shows half the bytes, and float32 communication gives the float32 sum instead.
#include <gtest/gtest.h>

#include <cstring>

#include "equivalence.h"
#include "engine/trace.h"
#include "kernels/half_types.h"
#include "support/trace_checks.h"
#include "train/runners/ddp.h"
#include "train/step/gradient_wire.h"
#include "train/step/step.h"

namespace dpcore::testing {
namespace {

constexpr int64_t kBatch = 24;

ParallelOptions two_replicas(const std::string& mode, const std::string& grad_dtype) {
  ParallelOptions o;
  o.replicas = 2;
  o.mode = mode;
  o.grad_dtype = grad_dtype;
  o.bucket_mb = 0.05;  // several buckets, so that ddp's are not dp's one
  return o;
}

// The float32 gradient of rows [begin, end) of `b` on one device, seeded as the step seeds
// each share: 1 / (the whole batch's counted targets).
std::vector<float> share_gradient(const HostBatch& b, int64_t begin, int64_t end) {
  auto model = simplenet(5);
  auto [x, y] = train::batch_tensors(train::batch_rows(b.batch, begin, end), Device::cpu());
  model->zero_grad();
  train::forward_backward(*model, x, y, train::gradient_scale(kBatch));
  return model->parameters().grads().to_vector<float>();
}

std::vector<float> reduced_gradient_after_one_step(const std::string& mode, const std::string& grad_dtype,
                                                   const HostBatch& b) {
  auto runner = train::make_runner(simplenet(5), kSgd, 1, two_replicas(mode, grad_dtype));
  runner->set_step_number(1);
  runner->step(b.batch);
  runner->settle();
  return runner->model().parameters().grads().to_vector<float>();
}

bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

float bf16_sum(float a, float b) {
  using kernels::bfloat16_to_float;
  using kernels::float_to_bfloat16;
  return bfloat16_to_float(float_to_bfloat16(bfloat16_to_float(float_to_bfloat16(a)) +
                                             bfloat16_to_float(float_to_bfloat16(b))));
}

TEST(GradientWire, TwoReplicasReduceTheBfloat16SumOfTheirRoundedGradientsOnDpAndDdp) {
  const HostBatch b = make_batch(kBatch, 100, {3, 32, 32});
  const std::vector<float> g0 = share_gradient(b, 0, kBatch / 2), g1 = share_gradient(b, kBatch / 2, kBatch);
  std::vector<float> wire(g0.size()), exact(g0.size());
  for (size_t i = 0; i < g0.size(); ++i) wire[i] = bf16_sum(g0[i], g1[i]), exact[i] = g0[i] + g1[i];
  for (const std::string mode : {"dp", "ddp"}) {
    SCOPED_TRACE(mode);
    const std::vector<float> got = reduced_gradient_after_one_step(mode, "bf16", b);
    EXPECT_TRUE(bit_identical(got, wire));
    // The float32 allreduce gives the float32 sum: the two really differ.
    const std::vector<float> fp32 = reduced_gradient_after_one_step(mode, "fp32", b);
    EXPECT_TRUE(bit_identical(fp32, exact));
    EXPECT_FALSE(bit_identical(got, fp32));
  }
}

TEST(GradientWire, TheTraceShowsHalfTheBytes) {
  TempDir dir;
  const HostBatch b = make_batch(kBatch, 100, {3, 32, 32});
  for (const std::string mode : {"dp", "ddp"}) {
    SCOPED_TRACE(mode);
    auto runner = train::make_runner(simplenet(5), kSgd, 1, two_replicas(mode, "bf16"));
    trace::set_lane("main", trace::kMainLane);
    trace::start();
    runner->step(b.batch);
    trace::stop();
    trace::write(dir.file(mode + ".json"));
    const TraceFile t = read_trace(dir.file(mode + ".json"));
    int64_t bytes = 0;  // replica 0's, which every replica moves
    for (int r = 0; r < 2; ++r) {
      const std::string name = mode == "dp" ? "allreduce all gradients" : "allreduce bucket";
      int64_t replica_bytes = 0;
      for (const TraceSpan& s : spans_of(t, "comm " + std::to_string(r), name)) replica_bytes += s.args["bytes"].get<int64_t>();
      if (r == 0) bytes = replica_bytes;
      EXPECT_EQ(replica_bytes, bytes) << "replica " << r;
    }
    EXPECT_EQ(bytes, runner->model().parameters().total() * 2);
  }
}

TEST(GradientWire, FlagValuesAndBuffers) {
  EXPECT_EQ(train::grad_dtype_of("fp32"), DType::Float32);
  EXPECT_EQ(train::grad_dtype_of("bf16"), DType::BFloat16);
  try {
    train::grad_dtype_of("fp8");
    ADD_FAILURE() << "fp8 was taken";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--grad-dtype fp8: unknown (expected fp32 or bf16)");
  }
  Tensor grads = Tensor::zeros({10});
  EXPECT_FALSE(train::make_wire_gradients(DType::Float32, grads).defined());
  Tensor wire = train::make_wire_gradients(DType::BFloat16, grads);
  EXPECT_EQ(wire.dtype(), DType::BFloat16);
  EXPECT_EQ(wire.numel(), 10);
}

}  // namespace
}  // namespace dpcore::testing
