// The CPU kernels start no threads once the OpenMP pool is up: a kernel that shares out its
// own work (a GEMM split into blocks) runs on the pool whether or not the loop around it
// found work for more than one thread. libgomp starts a fresh thread for every parallel
// region opened inside another region, even a one-thread one, so a kernel that wrapped
// one image's convolution or one matrix's 16-bit product in a one-thread loop started a
// thread per call (and ran beside the pool's spinning workers: a bfloat16 linear layer
// took 3.5x as long as float32; kernels/cpu/parallel.h, parallel_for_each).
//
// pthread_create is counted by defining it here: the executable's definition comes first
// in symbol lookup, so libgomp's calls reach it, and it passes them on to the next
// definition (libc's, or a sanitizer runtime's interceptor).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/half/gemm_half.h"
#include "kernels/cpu/kernels.h"
#include "kernels/half_types.h"

namespace {
std::atomic<int> g_threads_started{0};
}

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg) {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const Create next = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
  g_threads_started.fetch_add(1);
  return next(thread, attr, start, arg);
}

namespace dpcore::testing {
namespace {

namespace cpu = kernels::cpu;
using kernels::BFloat16;

// Runs `kernel` once on 2 threads (which may start the pool), then three more times, and
// expects no thread started by those.
void expect_no_thread_started(const std::string& what, const std::function<void()>& kernel) {
  const int before = cpu::num_threads();
  cpu::set_num_threads(2);
  kernel();
  const int started = g_threads_started.load();
  for (int call = 0; call < 3; ++call) kernel();
  EXPECT_EQ(g_threads_started.load() - started, 0) << what << " started threads after the first call";
  cpu::set_num_threads(before);
}

template <class T>
std::vector<T> values(size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float f = float(int(i % 7) - 3) * 0.25f;
    if constexpr (std::is_same_v<T, float>) {
      v[i] = f;
    } else {
      v[i] = kernels::from_float<T>(f);
    }
  }
  return v;
}

// The counter works: a thread started here is counted.
TEST(KernelThreadReuse, ACountedThreadIsSeen) {
  const int started = g_threads_started.load();
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr, [](void*) -> void* { return nullptr; }, nullptr), 0);
  pthread_join(t, nullptr);
  EXPECT_EQ(g_threads_started.load() - started, 1);
}

// One matrix of 16-bit products (a linear layer over 2048 tokens, 128 -> 512 features),
// on each GEMM path this CPU has.
TEST(KernelThreadReuse, SixteenBitLinearLayers) {
  kernels::LinearShape s;
  s.N = 2048, s.in = 128, s.out = 512;
  const auto x = values<BFloat16>(size_t(s.N * s.in)), w = values<BFloat16>(size_t(s.out * s.in)),
             bias = values<BFloat16>(size_t(s.out));
  std::vector<BFloat16> y(size_t(s.N * s.out));
  const cpu::HalfGemmPath chosen = cpu::half_gemm_path();
  std::vector<cpu::HalfGemmPath> paths = {cpu::HalfGemmPath::Convert};
  if (cpu::cpu_has_avx512_bf16()) paths.push_back(cpu::HalfGemmPath::Avx512Bf16);
  if (cpu::cpu_has_amx_bf16()) paths.push_back(cpu::HalfGemmPath::AmxBf16);
  for (cpu::HalfGemmPath path : paths) {
    cpu::set_half_gemm_path(path);
    expect_no_thread_started(std::string("bfloat16 linear forward, ") + cpu::half_gemm_path_name(path),
                             [&] { cpu::linear_forward(s, x.data(), w.data(), bias.data(), y.data()); });
  }
  cpu::set_half_gemm_path(chosen);
}

// A convolution of one image (fewer images than threads: the batch loop has one thread's
// work, the GEMM inside it blocks to share out), float32 and bfloat16.
template <class T>
void expect_single_image_convolution_reuses_threads(const std::string& what) {
  kernels::Conv2dShape s;
  s.N = 1, s.C = 16, s.H = 32, s.W = 32, s.K = 32, s.R = 3, s.S = 3, s.pad_h = 1, s.pad_w = 1, s.P = 32, s.Q = 32;
  const auto x = values<T>(size_t(s.x_size())), w = values<T>(size_t(s.w_size())), dy = values<T>(size_t(s.y_size()));
  std::vector<T> y(size_t(s.y_size())), dw(size_t(s.w_size())), dbias(size_t(s.K));
  expect_no_thread_started(what + " conv2d forward",
                           [&] { cpu::conv2d_forward(s, x.data(), w.data(), static_cast<const T*>(nullptr), y.data()); });
  expect_no_thread_started(what + " conv2d weight gradient", [&] {
    cpu::conv2d_backward_weight(s, x.data(), dy.data(), dw.data(), dbias.data(), false);
  });
}

TEST(KernelThreadReuse, OneImageConvolutions) {
  expect_single_image_convolution_reuses_threads<float>("float32");
  expect_single_image_convolution_reuses_threads<BFloat16>("bfloat16");
}

}  // namespace
}  // namespace dpcore::testing
