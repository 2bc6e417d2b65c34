#!/usr/bin/env bash
# The main job on a fresh machine: install what is needed, build, and train fashioncnn on
# the real Fashion-MNIST on the best device present. Extra arguments go to `dpcore train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/layers/dpcore train "$@"
