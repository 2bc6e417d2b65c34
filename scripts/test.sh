#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite with ctest, three times:
#   1. build/        the project as shipped (CUDA compiled when nvcc is there): every test
#                    but the host-run kernels (stage 2 runs them); tests that need a GPU
#                    skip, saying why, on machines without one;
#   2. build-asan/   CPU-only, AddressSanitizer + UndefinedBehaviorSanitizer: the CPU code's
#                    tests (not the CLI's and the package's, which run whole processes),
#                    and every hand CUDA kernel run on the host (tests/host_exec);
#   3. build-tsan/   ThreadSanitizer: the hand CUDA kernels on the host (label `host`), so a
#                    race between the threads of a block fails the run, and the threaded
#                    CPU paths (label `threads`): replicas, communicators, loader, traces.
# Extra arguments go to every ctest run (e.g. -R host). DPCORE_TEST_STAGES=main skips 2-3.
# $DPCORE_CMAKE_ARGS (scripts/build.sh) adds CMake options to build/'s configuration only.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}  # CI shares its two cores between tests
jobs=$(nproc)
if [ "${DPCORE_TEST_STAGES:-all}" = main ]; then
  scripts/build.sh -DDPCORE_HOST_TESTS=ON
  (cd build && ctest --output-on-failure -j"$jobs" --timeout 900 "$@")
  exit 0
fi
# build/ configured as scripts/train.sh configures it (scripts/build.sh decides for both),
# so after the main job only the tests are left to compile. The host-run kernels are built
# and run in the sanitizer builds below, not here as well.
scripts/build.sh
(cd build && ctest --output-on-failure -j"$jobs" --timeout 900 "$@")

# The sanitizer builds: -O1 and line tables only (-g1) keep them quick to build, still fast
# enough to run, and their reports still give file:line. No
# MPI (Open MPI's own allocations would be reported as leaks) and no CUDA (the kernels run
# on the host instead).
sanitized_build() {  # folder sanitizers [targets...]
  local dir=$1 sanitizers=$2
  shift 2
  mkdir -p "$dir"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Sanitize "-DCMAKE_CXX_FLAGS=-O1 -g1" -DDPCORE_CUDA=OFF -DDPCORE_MPI=OFF \
    -DDPCORE_BENCH=OFF -DDPCORE_SANITIZE="$sanitizers" > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
  cmake --build "$dir" -j"$jobs" ${1:+--target "$@"}
}

echo "== AddressSanitizer + UndefinedBehaviorSanitizer: CPU tests and host-run CUDA kernels (build-asan)"
sanitized_build build-asan address,undefined
# Left out here (the normal build runs them): the PyTorch interop tests, whose time goes to
# PyTorch subprocesses, the whole-model gradient checks, whose kernels the op tests above
# cover under the sanitizers, bert-tiny's 20 AdamW steps against PyTorch (bert_test and
# the small BERT parity case run BERT's code here), and the rebuild of the committed
# vocabulary from the whole fortunes corpus (text_test's small cases run the builder here).
(cd build-asan && UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs" --timeout 900 \
  -E 'PyTorchWeights|PyTorchLoad|TorchvisionResNet|ModelGradcheck|BertTinyAfter20AdamWSteps|CommittedVocabRebuilds' "$@")

# Every kernel once: the tiled GEMMs planned for one SM (host_sm1.*: the large tiles wherever
# the output allows, the small ones elsewhere, so both thread layouts are raced), the
# other kernels, which do not depend on the SM count, from host.* (docs/testing.md); the
# host CUDA runtime's own tests, among them the race between two streams no event orders, and
# its NCCL's (a collective that does not wait for the stream that wrote its input). And the
# threaded CPU paths (label `threads`: runners, communicators, loader, traces, faults,
# shrink, local SGD, async), without the collectives of a million elements (their races are
# the smaller sizes', in 7 times the time) and the two tests that read the whole of
# Fashion-MNIST on one thread, and the step on 2 and 3 kernel threads (its OpenMP teams are
# what this stage cannot see; the other two stages run it). One OpenMP thread per kernel: libgomp is not instrumented, so
# ThreadSanitizer cannot see its barriers and would report every parallel loop.
echo "== ThreadSanitizer: host-run CUDA kernels and the threaded CPU paths (build-tsan)"
sanitized_build build-tsan thread host_exec_test host_runtime_test host_nccl_test host_graph_test host_ops_test host_tiled_ops_test threaded_tests
(cd build-tsan && OMP_NUM_THREADS=1 ctest --output-on-failure -j"$jobs" --timeout 900 -L 'host|threads' \
  -E '^host[.](Conv2d|Gemm|Linear)|_n1000000_|RealDatasetFromDebianPackage|RealFashionMnistStatistics|OneDevicesStepIsTheSameBitsOnAnyThreadCount' "$@")
