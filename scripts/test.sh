#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite with ctest. Tests that
# need a GPU skip (and say why) on machines without one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}  # CI shares its two cores between tests
ctest --output-on-failure -j"$(nproc)" --timeout 900 "$@"
