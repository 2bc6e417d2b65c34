#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite with ctest. Tests that
# need a GPU skip (and say why) on machines without one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@"
