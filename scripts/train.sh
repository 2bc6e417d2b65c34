#!/usr/bin/env bash
# The main job on a fresh machine: install what is needed, build, and train fashioncnn on
# the real Fashion-MNIST on the best device present. Extra arguments go to `dpcore train`.
# Only what the job runs is installed and built: the library and the dpcore command (no
# tests, no benchmarks), in build/ configured as scripts/test.sh configures it
# (scripts/build.sh), so the tests later compile only their own files.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --train
scripts/build.sh dpcore_cli
# Idle OpenMP threads sleep instead of spinning: on a machine shared with other work,
# spinning turns a 5 ms step into 90 (docs/benchmarks.md). Override by setting it yourself.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
exec build/bin/dpcore train "$@"
