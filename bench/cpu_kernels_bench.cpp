// The CPU conv2d and linear kernels on the reference models' layer shapes (batch 64,
// float32; bert-tiny's linears over its 32 x 128 tokens), and batched_matmul on attention's
// shapes, on 1 and 2 threads. Reports GFLOP/s (2 flops per multiply-add) as a counter.
// The convolutions run on both CPU paths where the direct one applies (argument
// "direct": 1 = the default choice, kernels/cpu/conv2d_direct.h where it applies; 0 =
// im2col + GEMM everywhere, set_direct_conv2d(false)), one after the other.
//   cpu_kernels_bench --benchmark_filter=Conv2dForward
#include <benchmark/benchmark.h>

#include <initializer_list>
#include <iterator>
#include <type_traits>
#include <vector>

#include "bench/cpu_bench_support.h"
#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/kernels.h"

namespace {

namespace cpu = dpcore::kernels::cpu;
using dpcore::kernels::Conv2dShape;
using dpcore::kernels::LinearShape;

constexpr int64_t kBatch = 64;

struct ConvLayer {
  const char* name;
  int64_t C, K, HW, stride;  // 3x3, padding 1; HW is the input's height and width
};
// Every 3x3 convolution of the reference models and of resnet8 on 1x28x28 (resnet20's are
// the same shapes, more of them).
const ConvLayer kConvLayers[] = {
    {"fashioncnn.c1 1->32 28x28", 1, 32, 28, 1},      {"fashioncnn.c2 32->64 14x14", 32, 64, 14, 1},
    {"simplenet.conv 3->16 32x32", 3, 16, 32, 1},     {"vggs.c1 3->64 32x32", 3, 64, 32, 1},
    {"vggs.c2 64->128 16x16", 64, 128, 16, 1},        {"vggs.c3 128->256 8x8", 128, 256, 8, 1},
    {"resnet.conv1 1->16 28x28", 1, 16, 28, 1},       {"resnet.layer1 16->16 28x28", 16, 16, 28, 1},
    {"resnet.layer2.0.conv1 16->32 /2", 16, 32, 28, 2}, {"resnet.layer2 32->32 14x14", 32, 32, 14, 1},
    {"resnet.layer3.0.conv1 32->64 /2", 32, 64, 14, 2}, {"resnet.layer3 64->64 7x7", 64, 64, 7, 1},
};

struct LinearLayer {
  const char* name;
  int64_t rows, in, out;  // rows: the batch, or the tokens of a batch of sequences
};
// bert-tiny's (hidden 128, intermediate 512) and bert-mini's (256, 1024) over batch 32 x
// sequence length 128: the attention's projections, the intermediate layer and the output
// layer. Their weight gradient dW = dy^T x sums over the 4096 tokens. Run the forward and
// the weight gradient side by side:
//   cpu_kernels_bench --benchmark_filter='Linear(Forward|BackwardWeight).*layer:[345678]/'
const LinearLayer kLinearLayers[] = {
    {"fashioncnn.f1 3136->128", kBatch, 3136, 128},
    {"fashioncnn.f2 128->10", kBatch, 128, 10},
    {"simplenet/vggs.fc 4096->10", kBatch, 4096, 10},
    {"bert-tiny attention 4096x128->128", 32 * 128, 128, 128},
    {"bert-tiny intermediate 4096x128->512", 32 * 128, 128, 512},
    {"bert-tiny output 4096x512->128", 32 * 128, 512, 128},
    {"bert-mini attention 4096x256->256", 32 * 128, 256, 256},
    {"bert-mini intermediate 4096x256->1024", 32 * 128, 256, 1024},
    {"bert-mini output 4096x1024->256", 32 * 128, 1024, 256},
};

Conv2dShape conv_shape(const ConvLayer& l) {
  Conv2dShape s;
  s.N = kBatch, s.C = l.C, s.H = l.HW, s.W = l.HW, s.K = l.K, s.R = 3, s.S = 3, s.pad_h = 1, s.pad_w = 1;
  s.stride_h = s.stride_w = l.stride;
  s.P = s.Q = dpcore::kernels::conv_out_size(l.HW, 3, l.stride, 1);
  return s;
}

using dpcore::bench::random_floats;
using dpcore::bench::report_flops;

// Sets the thread count from the benchmark's second argument and labels the run.
void prepare(benchmark::State& state, const char* name) { dpcore::bench::prepare(state, int(state.range(1)), name); }

enum class ConvPass { Forward, BackwardData, BackwardWeight };

// random_floats(n) as T: float32 as drawn, bfloat16 rounded from them.
template <class T>
std::vector<T> conv_inputs(int64_t n) {
  std::vector<float> f = random_floats(n);
  if constexpr (std::is_same_v<T, float>) {
    return f;
  } else {
    std::vector<T> h(f.size());
    cpu::cast(n, f.data(), h.data());
    return h;
  }
}

// One pass of convolution `s` on T tensors, timed.
template <class T>
void time_conv(benchmark::State& state, const Conv2dShape& s, ConvPass pass) {
  auto x = conv_inputs<T>(s.x_size()), w = conv_inputs<T>(s.w_size()), b = conv_inputs<T>(s.K),
       y = conv_inputs<T>(s.y_size()), dw = conv_inputs<T>(s.w_size());
  for (auto _ : state) {
    switch (pass) {
      case ConvPass::Forward: cpu::conv2d_forward(s, x.data(), w.data(), b.data(), y.data()); break;
      case ConvPass::BackwardData: cpu::conv2d_backward_data(s, y.data(), w.data(), x.data()); break;
      case ConvPass::BackwardWeight:
        cpu::conv2d_backward_weight(s, x.data(), y.data(), dw.data(), b.data(), false);
        break;
    }
    benchmark::ClobberMemory();
  }
  report_flops(state, s.flops());
}

// Layer state.range(0) in float32, on the direct path or the im2col one.
void run_conv(benchmark::State& state, ConvPass pass, bool direct) {
  const ConvLayer& layer = kConvLayers[state.range(0)];
  prepare(state, layer.name);
  cpu::set_direct_conv2d(direct);
  time_conv<float>(state, conv_shape(layer), pass);
  cpu::set_direct_conv2d(true);
}

// The same convolution in bfloat16 (kernels/cpu/half/conv2d_half.cpp, im2col + the
// AVX512-BF16 GEMM where the CPU has it) right after float32's default path:
//   cpu_kernels_bench --benchmark_filter='Conv2dBf16'
// {layer, threads, bf16}: bf16 0 is float32, 1 bfloat16.
void run_conv_bf16(benchmark::State& state, ConvPass pass) {
  if (state.range(2) == 0) return run_conv(state, pass, true);  // float32's default path
  const ConvLayer& layer = kConvLayers[state.range(0)];
  prepare(state, layer.name);
  time_conv<dpcore::kernels::BFloat16>(state, conv_shape(layer), pass);
}

enum class LinearPass { Forward, BackwardData, BackwardWeight };

void run_linear(benchmark::State& state, LinearPass pass) {
  const LinearLayer& layer = kLinearLayers[state.range(0)];
  prepare(state, layer.name);
  const LinearShape s{layer.rows, layer.in, layer.out};
  auto x = random_floats(s.N * s.in), w = random_floats(s.out * s.in), b = random_floats(s.out),
       y = random_floats(s.N * s.out), dw = random_floats(s.out * s.in);
  for (auto _ : state) {
    switch (pass) {
      case LinearPass::Forward: cpu::linear_forward(s, x.data(), w.data(), b.data(), y.data()); break;
      case LinearPass::BackwardData: cpu::linear_backward_data(s, y.data(), w.data(), x.data()); break;
      case LinearPass::BackwardWeight:
        cpu::linear_backward_weight(s, x.data(), y.data(), dw.data(), b.data(), false);
        break;
    }
    benchmark::ClobberMemory();
  }
  report_flops(state, s.flops());
}

void BM_Conv2dForward(benchmark::State& state) { run_conv(state, ConvPass::Forward, state.range(2) != 0); }
void BM_Conv2dBf16Forward(benchmark::State& state) { run_conv_bf16(state, ConvPass::Forward); }
void BM_Conv2dBf16BackwardData(benchmark::State& state) { run_conv_bf16(state, ConvPass::BackwardData); }
void BM_Conv2dBf16BackwardWeight(benchmark::State& state) { run_conv_bf16(state, ConvPass::BackwardWeight); }
void BM_Conv2dBackwardData(benchmark::State& state) { run_conv(state, ConvPass::BackwardData, state.range(2) != 0); }
void BM_Conv2dBackwardWeight(benchmark::State& state) {
  run_conv(state, ConvPass::BackwardWeight, state.range(2) != 0);
}
void BM_LinearForward(benchmark::State& state) { run_linear(state, LinearPass::Forward); }
void BM_LinearBackwardData(benchmark::State& state) { run_linear(state, LinearPass::BackwardData); }
void BM_LinearBackwardWeight(benchmark::State& state) { run_linear(state, LinearPass::BackwardWeight); }

// Arguments {layer index, threads}; wall-clock time, since the work runs on several threads.
template <size_t Layers>
void layer_and_thread_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layer", "threads"});
  for (int64_t layer = 0; layer < int64_t(Layers); ++layer)
    for (int64_t threads : {1, 2}) b->Args({layer, threads});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

// Arguments {layer index, threads, `variant`} with the variant's two values in `order`:
// each convolution both ways one right after the other, so that they see about the same
// machine.
void conv_variant_args(benchmark::internal::Benchmark* b, const char* variant, std::initializer_list<int64_t> order) {
  b->ArgNames({"layer", "threads", variant});
  for (int64_t layer = 0; layer < int64_t(std::size(kConvLayers)); ++layer)
    for (int64_t threads : {1, 2})
      for (int64_t value : order) b->Args({layer, threads, value});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
// direct 1 (the default path), then 0 (im2col).
void conv_args(benchmark::internal::Benchmark* b) { conv_variant_args(b, "direct", {1, 0}); }
// bf16 0 (float32's default path), then 1 (bfloat16).
void conv_bf16_args(benchmark::internal::Benchmark* b) { conv_variant_args(b, "bf16", {0, 1}); }

constexpr size_t kLinearCount = std::size(kLinearLayers);
BENCHMARK(BM_Conv2dForward)->Apply(conv_args);
BENCHMARK(BM_Conv2dBackwardData)->Apply(conv_args);
BENCHMARK(BM_Conv2dBackwardWeight)->Apply(conv_args);
BENCHMARK(BM_Conv2dBf16Forward)->Apply(conv_bf16_args);
BENCHMARK(BM_Conv2dBf16BackwardData)->Apply(conv_bf16_args);
BENCHMARK(BM_Conv2dBf16BackwardWeight)->Apply(conv_bf16_args);
BENCHMARK(BM_LinearForward)->Apply(layer_and_thread_args<kLinearCount>);
BENCHMARK(BM_LinearBackwardData)->Apply(layer_and_thread_args<kLinearCount>);
BENCHMARK(BM_LinearBackwardWeight)->Apply(layer_and_thread_args<kLinearCount>);

// ---- batched_matmul: attention's two products, batch 8 x 8 heads, head dim 64 ----
struct BatchedMatmulLayer {
  const char* name;
  dpcore::kernels::BatchedMatmulShape shape;
};
const BatchedMatmulLayer kBatchedMatmulLayers[] = {
    {"scores Q K^T 64x[128,64]x[128,64]^T", {64, 128, 128, 64, false, true}},
    {"values P V 64x[128,128]x[128,64]", {64, 128, 64, 128, false, false}},
    {"scores Q K^T 64x[512,64]x[512,64]^T", {64, 512, 512, 64, false, true}},
};

void BM_BatchedMatmul(benchmark::State& state) {
  const BatchedMatmulLayer& layer = kBatchedMatmulLayers[state.range(0)];
  prepare(state, layer.name);
  const auto& s = layer.shape;
  auto a = random_floats(s.a_size()), b = random_floats(s.b_size()), c = random_floats(s.c_size());
  for (auto _ : state) {
    cpu::batched_matmul(s, a.data(), b.data(), c.data());
    benchmark::ClobberMemory();
  }
  report_flops(state, s.flops());
}
BENCHMARK(BM_BatchedMatmul)->Apply(layer_and_thread_args<std::size(kBatchedMatmulLayers)>);

}  // namespace
