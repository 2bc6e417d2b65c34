#!/usr/bin/env bash
# Regenerates docs/images/step-dp-vs-ddp.png (docs/data-parallel.md, "Watching a step"):
# one training step of fashioncnn on the real Fashion-MNIST with 3 CPU replicas, --mode dp
# above --mode ddp, from traces recorded by `dpcore train --trace`: of the 7 steps traced
# in each mode, the one of median duration.
#   scripts/make_timelines.sh [BUILD_DIR]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --pictures  # Debian's python3-matplotlib
build=${1:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for mode in dp ddp; do
  OMP_WAIT_POLICY=passive "$build/bin/dpcore" train --model fashioncnn --device cpu --replicas 3 --mode "$mode" \
    --threads 1 --steps 9 --trace-steps 7 --progress 0 --trace "$dir/$mode.json"
done
mkdir -p docs/images
/usr/bin/python3 scripts/plot_timeline.py --step median --out docs/images/step-dp-vs-ddp.png \
  --title "fashioncnn, batch 64, 3 CPU replicas (threads of one process, 1 kernel thread each, 2 cores)" \
  --trace="--mode dp: scatter, forward, gather, loss, backward, then one allreduce=$dir/dp.json" \
  --trace="--mode ddp: each bucket's allreduce starts as soon as its gradients are ready=$dir/ddp.json"
