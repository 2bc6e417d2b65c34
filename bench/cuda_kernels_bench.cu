// Every CUDA kernel, hand-written and library, on the reference models' shapes at their
// training batch sizes (simplenet 64, fashioncnn 512, vggs 256) plus SGEMM 4096^3.
// Timed with CUDA events around one launch, the L2 cache flushed before each repeat (so
// every run reads its inputs from HBM, as in a training step), after one warm-up launch
// (library handles, cuDNN algorithm choice, allocator cache).
// Counters: TFLOP/s and GB/s (bytes each kernel must move at least: inputs read once,
// outputs written once) and their fractions of the H200 ceilings measured with PyTorch:
// device copy 4.25 TB/s, cuBLAS FP32 SGEMM 51 TFLOP/s (bench/cuda_bench_support.h). Issue 24's
// transformer kernels are in cuda_transformer_bench.cu.
//   cuda_kernels_bench --benchmark_filter='conv.*vggs'
// Without a GPU it prints "no CUDA device" and exits with 0.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <string>

#include "bench/cuda_bench_support.h"
#include "kernels/cuda_runtime/check.h"
#include "kernels/index_check.h"
#include "kernels/cuda_libraries/cublas_linear.h"
#include "kernels/cuda_libraries/cudnn_conv2d.h"
#include "kernels/cuda_runtime/devices.h"
#include "kernels/cuda_libraries/engine_config.h"
#include "kernels/cuda/kernels.h"

namespace {

namespace hand = dpcore::kernels::cuda;
namespace cuda_runtime = dpcore::kernels::cuda_runtime;
namespace cuda_libraries = dpcore::kernels::cuda_libraries;
using dpcore::kernels::Conv2dShape;
using dpcore::kernels::LinearShape;
using dpcore::kernels::Pool2dShape;

using dpcore::bench::add;
using dpcore::bench::Buffer;
using dpcore::bench::run_timed;
using dpcore::bench::Work;

// ---- the reference models' layers ----

struct ConvLayer {
  const char* name;
  int64_t batch, C, K, HW;
};
// Every convolution of the reference models: 3x3, stride 1, padding 1, at the model's batch.
const ConvLayer kConvLayers[] = {
    {"simplenet.conv 3->16 32x32 b64", 64, 3, 16, 32},    {"fashioncnn.c1 1->32 28x28 b512", 512, 1, 32, 28},
    {"fashioncnn.c2 32->64 14x14 b512", 512, 32, 64, 14}, {"vggs.c1 3->64 32x32 b256", 256, 3, 64, 32},
    {"vggs.c2 64->128 16x16 b256", 256, 64, 128, 16},     {"vggs.c3 128->256 8x8 b256", 256, 128, 256, 8},
};

Conv2dShape conv_shape(const ConvLayer& l) {
  Conv2dShape s;
  s.N = l.batch, s.C = l.C, s.H = l.HW, s.W = l.HW, s.K = l.K, s.R = 3, s.S = 3, s.pad_h = 1, s.pad_w = 1;
  s.P = l.HW, s.Q = l.HW;
  return s;
}

// The bias gradient alone (both engines use it), bandwidth-bound: it reads dy once.
void register_channel_sum(const std::string& suffix, const Conv2dShape& s) {
  add("channel_sum" + suffix, [s](benchmark::State& state) {
    Buffer dy(s.y_size()), db(s.K);
    run_timed(state, {0, 4.0 * s.y_size()},
              [&] { hand::channel_sum(s.N, s.K, s.P * s.Q, dy.f(), db.f(), false, nullptr); });
  });
}

void register_conv(const ConvLayer& l) {
  const Conv2dShape s = conv_shape(l);
  const double x = 4.0 * s.x_size(), w = 4.0 * s.w_size(), y = 4.0 * s.y_size();
  const std::string suffix = std::string("/") + l.name;
  register_channel_sum(suffix, s);
  struct Engine {
    const char* name;
    bool hand, tf32;
  };
  for (Engine e : {Engine{"hand", true, false}, Engine{"cudnn", false, false}, Engine{"cudnn_tf32", false, true}}) {
    add(std::string("conv_fwd/") + e.name + suffix, [s, e, x, w, y](benchmark::State& state) {
      Buffer bx(s.x_size()), bw(s.w_size()), bb(s.K), by(s.y_size());
      run_timed(state, {s.flops(), x + w + y}, [&] {
        if (e.hand) {
          hand::conv2d_relu_forward(s, bx.f(), bw.f(), bb.f(), by.f(), nullptr);
        } else {
          cuda_libraries::cudnn::conv2d_forward(s, bx.f(), bw.f(), by.f(), false, nullptr);
          hand::bias_activation(s.N, s.K, s.P * s.Q, bb.f(), true, by.f(), nullptr);
        }
      }, e.tf32);
    });
    add(std::string("conv_bwd_data/") + e.name + suffix, [s, e, x, w, y](benchmark::State& state) {
      Buffer bdy(s.y_size()), bw(s.w_size()), bdx(s.x_size());
      run_timed(state, {s.flops(), y + w + x}, [&] {
        if (e.hand) {
          hand::conv2d_backward_data(s, bdy.f(), bw.f(), bdx.f(), nullptr);
        } else {
          cuda_libraries::cudnn::conv2d_backward_data(s, bdy.f(), bw.f(), bdx.f(), nullptr);
        }
      }, e.tf32);
    });
    add(std::string("conv_bwd_weight/") + e.name + suffix, [s, e, x, w, y](benchmark::State& state) {
      Buffer bx(s.x_size()), bdy(s.y_size()), bdw(s.w_size()), bdb(s.K);
      run_timed(state, {s.flops(), x + y + w}, [&] {
        if (e.hand) {
          hand::conv2d_backward_weight(s, bx.f(), bdy.f(), bdw.f(), bdb.f(), false, nullptr);
        } else {
          cuda_libraries::cudnn::conv2d_backward_weight(s, bx.f(), bdy.f(), bdw.f(), false, nullptr);
          hand::channel_sum(s.N, s.K, s.P * s.Q, bdy.f(), bdb.f(), false, nullptr);
        }
      }, e.tf32);
    });
  }
}

struct LinearLayer {
  const char* name;
  int64_t batch, in, out;
};
const LinearLayer kLinearLayers[] = {
    {"simplenet.fc 4096->10 b64", 64, 4096, 10},
    {"fashioncnn.f1 3136->128 b512", 512, 3136, 128},
    {"fashioncnn.f2 128->10 b512", 512, 128, 10},
    {"vggs.fc 4096->10 b256", 256, 4096, 10},
};

void register_linear(const LinearLayer& l) {
  LinearShape s;
  s.N = l.batch, s.in = l.in, s.out = l.out;
  const double x = 4.0 * s.N * s.in, w = 4.0 * s.in * s.out, y = 4.0 * s.N * s.out;
  struct Engine {
    const char* name;
    hand::SgemmFn gemm;
  };
  for (Engine e : {Engine{"hand", hand::sgemm}, Engine{"cublas", cuda_libraries::cublas::sgemm}}) {
    const std::string suffix = std::string("/") + e.name + "/" + l.name;
    add("linear_fwd" + suffix, [s, e, x, w, y](benchmark::State& state) {
      Buffer bx(s.N * s.in), bw(s.out * s.in), bb(s.out), by(s.N * s.out);
      run_timed(state, {s.flops(), x + w + y},
                [&] { hand::linear_forward(s, bx.f(), bw.f(), bb.f(), by.f(), nullptr, e.gemm); });
    });
    add("linear_bwd_data" + suffix, [s, e, x, w, y](benchmark::State& state) {
      Buffer bdy(s.N * s.out), bw(s.out * s.in), bdx(s.N * s.in);
      run_timed(state, {s.flops(), y + w + x},
                [&] { hand::linear_backward_data(s, bdy.f(), bw.f(), bdx.f(), nullptr, e.gemm); });
    });
    add("linear_bwd_weight" + suffix, [s, e, x, w, y](benchmark::State& state) {
      Buffer bx(s.N * s.in), bdy(s.N * s.out), bdw(s.out * s.in), bdb(s.out);
      run_timed(state, {s.flops(), x + y + w},
                [&] { hand::linear_backward_weight(s, bx.f(), bdy.f(), bdw.f(), bdb.f(), false, nullptr, e.gemm); });
    });
  }
}

void register_sgemm() {
  const int64_t n = 4096;
  const double flops = 2.0 * n * n * n, bytes = 3.0 * 4.0 * n * n;
  struct Engine {
    const char* name;
    hand::SgemmFn gemm;
    bool tf32;
  };
  for (Engine e : {Engine{"hand", hand::sgemm, false}, Engine{"cublas", cuda_libraries::cublas::sgemm, false},
                   Engine{"cublas_tf32", cuda_libraries::cublas::sgemm, true}}) {
    add(std::string("sgemm_4096/") + e.name, [=](benchmark::State& state) {
      Buffer a(n * n), b(n * n), c(n * n);
      run_timed(state, {flops, bytes},
                [&] { e.gemm(false, false, n, n, n, 1.f, a.f(), n, b.f(), n, 0.f, c.f(), n, nullptr); }, e.tf32);
    });
  }
}

// 2x2 stride-2 pools of the reference models, at their batch sizes.
struct PoolLayer {
  const char* name;
  int64_t batch, C, HW;
};
const PoolLayer kPoolLayers[] = {
    {"simplenet 16x32x32 b64", 64, 16, 32}, {"fashioncnn.p1 32x28x28 b512", 512, 32, 28},
    {"fashioncnn.p2 64x14x14 b512", 512, 64, 14}, {"vggs.p1 64x32x32 b256", 256, 64, 32},
    {"vggs.p2 128x16x16 b256", 256, 128, 16}, {"vggs.p3 256x8x8 b256", 256, 256, 8},
};

void register_pool(const PoolLayer& l) {
  Pool2dShape s;
  s.N = l.batch, s.C = l.C, s.H = l.HW, s.W = l.HW, s.P = l.HW / 2, s.Q = l.HW / 2;
  const double x = 4.0 * s.x_size(), y = 4.0 * s.y_size();
  add(std::string("max_pool_fwd/") + l.name, [s, x, y](benchmark::State& state) {
    Buffer bx(s.x_size()), by(s.y_size()), argmax(s.y_size());
    run_timed(state, {0, x + 2 * y}, [&] { hand::max_pool2d_forward(s, bx.f(), by.f(), argmax.as<int32_t>(), nullptr); });
  });
  add(std::string("max_pool_bwd/") + l.name, [s, x, y](benchmark::State& state) {
    Buffer bx(s.x_size()), by(s.y_size()), argmax(s.y_size()), bdy(s.y_size()), bdx(s.x_size());
    hand::max_pool2d_forward(s, bx.f(), by.f(), argmax.as<int32_t>(), nullptr);
    run_timed(state, {0, 2 * y + x}, [&] { hand::max_pool2d_backward(s, bdy.f(), argmax.as<int32_t>(), bdx.f(), nullptr); });
  });
  add(std::string("max_pool_relu_bwd/") + l.name, [s, x, y](benchmark::State& state) {
    Buffer bx(s.x_size()), by(s.y_size()), argmax(s.y_size()), bdy(s.y_size()), bdx(s.x_size());
    hand::max_pool2d_forward(s, bx.f(), by.f(), argmax.as<int32_t>(), nullptr);
    run_timed(state, {0, 2 * y + 2 * x},
              [&] { hand::max_pool2d_relu_backward(s, bdy.f(), argmax.as<int32_t>(), bx.f(), bdx.f(), nullptr); });
  });
}

// Flat kernels at the size of the largest activation above (vggs.c1's output) and of a
// 64M-element buffer (bandwidth-bound), and the classifier kernels at each model's batch.
void register_flat() {
  for (int64_t n : {int64_t(256) * 64 * 32 * 32, int64_t(64) << 20}) {
    const std::string size = "/" + std::to_string(n);
    const double b = 4.0 * n;
    add("relu_fwd" + size, [n, b](benchmark::State& state) {
      Buffer x(n), y(n);
      run_timed(state, {0, 2 * b}, [&] { hand::relu_forward(n, x.f(), y.f(), nullptr); });
    });
    add("relu_bwd" + size, [n, b](benchmark::State& state) {
      Buffer dy(n), y(n), dx(n);
      run_timed(state, {0, 3 * b}, [&] { hand::relu_backward(n, dy.f(), y.f(), dx.f(), nullptr); });
    });
    add("add" + size, [n, b](benchmark::State& state) {
      Buffer a(n), c(n), y(n);
      run_timed(state, {0, 3 * b}, [&] { hand::add(n, a.f(), c.f(), y.f(), nullptr); });
    });
    add("axpy" + size, [n, b](benchmark::State& state) {
      Buffer x(n), y(n);
      run_timed(state, {0, 3 * b}, [&] { hand::axpy(n, 0.5f, x.f(), y.f(), nullptr); });
    });
    add("scale" + size, [n, b](benchmark::State& state) {
      Buffer x(n), y(n);
      run_timed(state, {0, 2 * b}, [&] { hand::scale(n, 0.5f, x.f(), y.f(), nullptr); });
    });
    add("fill" + size, [n, b](benchmark::State& state) {
      Buffer y(n);
      run_timed(state, {0, b}, [&] { hand::fill<float>(n, 0.f, y.f(), nullptr); });
    });
    add("sum" + size, [n, b](benchmark::State& state) {
      Buffer x(n), out(1);
      run_timed(state, {0, b}, [&] { hand::sum(n, x.f(), out.f(), nullptr); });
    });
    add("sgd_momentum" + size, [n, b](benchmark::State& state) {
      Buffer p(n), g(n), m(n);
      dpcore::kernels::SgdConfig cfg;
      cfg.lr = 0.01, cfg.momentum = 0.9;
      run_timed(state, {0, 5 * b}, [&] { hand::sgd_step(n, cfg, false, p.f(), g.f(), m.f(), nullptr); });
    });
    add("memcpy_d2d" + size, [n, b](benchmark::State& state) {
      Buffer x(n), y(n);
      run_timed(state, {0, 2 * b},
                [&] { CUDA_CHECK(cudaMemcpyAsync(y.f(), x.f(), size_t(b), cudaMemcpyDeviceToDevice, nullptr)); });
    });
  }
  for (int64_t rows : {64, 256, 512}) {
    const int64_t cols = 10;
    const double b = 4.0 * rows * cols;
    const std::string size = "/" + std::to_string(rows) + "x10";
    add("log_softmax_fwd" + size, [=](benchmark::State& state) {
      Buffer x(rows * cols), y(rows * cols);
      run_timed(state, {0, 2 * b}, [&] { hand::log_softmax_forward(rows, cols, x.f(), y.f(), nullptr); });
    });
    add("cross_entropy_fused" + size, [=](benchmark::State& state) {
      Buffer logits(rows * cols), loss(1), dlogits(rows * cols), target(2 * rows);
      CUDA_CHECK(cudaMemset(target.f(), 0, size_t(rows) * sizeof(int64_t)));
      run_timed(state, {0, 2 * b + 8.0 * rows}, [&] {
        hand::cross_entropy_forward_backward(rows, cols, logits.f(), target.as<int64_t>(),
                                             dpcore::kernels::kDefaultIgnoreIndex, 1.f / rows, nullptr, loss.f(),
                                             dlogits.f(), nullptr);
      });
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda_runtime::device_count() == 0) {
    std::printf("no CUDA device: skipping the CUDA kernel benchmarks\n");
    return 0;
  }
  for (const ConvLayer& l : kConvLayers) register_conv(l);
  // A first layer's 16 channels at a large batch: 4M values per channel.
  register_channel_sum("/simplenet.conv 3->16 32x32 b4096", conv_shape({"", 4096, 3, 16, 32}));
  for (const LinearLayer& l : kLinearLayers) register_linear(l);
  register_sgemm();
  for (const PoolLayer& l : kPoolLayers) register_pool(l);
  register_flat();
  dpcore::bench::register_transformer_kernels();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
