#!/usr/bin/env bash
# Configures and builds dpcore in build/ (Release). Extra arguments go to CMake's configure
# step, e.g. scripts/build.sh -DDPCORE_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
