#!/usr/bin/env bash
# Configures build/ and builds the given targets in it (all of them when none is named).
# The one place that decides build/'s configuration: scripts/train.sh (which builds only
# the library and the dpcore command) and scripts/test.sh (everything) both come through
# here with the same options, so running one after the other compiles each file once.
#   scripts/build.sh [-DOPTION=VALUE...] [TARGET...]
# The options, last one winning:
#   - Release (the host-run kernel tests are not here: they come with the host CUDA
#     backend, -DDPCORE_CUDA=HOST, of scripts/test.sh's sanitizer builds);
#   - without a GPU (nvidia-smi finds none), the device code compiled for the H200 only
#     (sm_90) rather than also as PTX for older GPUs: nothing runs it here;
#   - the words of $DPCORE_CMAKE_ARGS, e.g. DPCORE_CMAKE_ARGS=-DDPCORE_CUDA=OFF for a
#     CPU-only build (set it the same for both scripts, or the second one reconfigures);
#   - the -D options given here.
set -euo pipefail
cd "$(dirname "$0")/.."
options=(-DCMAKE_BUILD_TYPE=Release)
nvidia-smi -L > /dev/null 2>&1 || options+=(-DCMAKE_CUDA_ARCHITECTURES=90-real)
read -r -a from_environment <<< "${DPCORE_CMAKE_ARGS:-}"
options+=("${from_environment[@]}")
targets=()
for arg in "$@"; do
  case $arg in
    -D*) options+=("$arg") ;;
    -*) echo "scripts/build.sh: $arg: expected -DOPTION=VALUE or a target name" >&2; exit 2 ;;
    *) targets+=(--target "$arg") ;;
  esac
done
cmake -S . -B build "${options[@]}"
cmake --build build -j"$(nproc)" "${targets[@]}"
