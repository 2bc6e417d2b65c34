#!/usr/bin/env bash
# The main job on a fresh machine: install what is needed, build, and train fashioncnn on
# the real Fashion-MNIST on the best device present. Extra arguments go to `dpcore train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# Idle OpenMP threads sleep instead of spinning: on a machine shared with other work,
# spinning turns a 5 ms step into 90 (docs/benchmarks.md). Override by setting it yourself.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
exec build/bin/dpcore train "$@"
