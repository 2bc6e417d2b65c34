#!/usr/bin/env bash
# Regenerates the timelines of docs/data-parallel.md ("Watching a step"), from traces
# recorded by `dpcore train --trace` of fashioncnn on the real Fashion-MNIST with 3 CPU
# replicas:
#   docs/images/step-dp-vs-ddp.png   --mode dp above --mode ddp: of the 7 steps traced in
#                                    each mode, the one of median duration;
#   docs/images/step-adaptive.png    --mode ddp --split adaptive with replica 2 slowed 3x
#                                    (--inject slow:replica=2,factor=3): step 3, still on
#                                    even shares, above step 17, after three re-weightings.
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
OMP_WAIT_POLICY=passive "$build/bin/dpcore" train --model fashioncnn --device cpu --replicas 3 --mode ddp \
  --split adaptive --inject slow:replica=2,factor=3 --threads 1 --steps 17 --trace-steps 15 --progress 0 \
  --trace "$dir/adaptive.json"
/usr/bin/python3 scripts/plot_timeline.py --out docs/images/step-adaptive.png \
  --title "fashioncnn, batch 64, 3 CPU replicas, --split adaptive, replica 2 slowed 3x (--inject slow:replica=2,factor=3)" \
  --trace="shares still even: replicas 0 and 1 wait for replica 2=$dir/adaptive.json@3" \
  --trace="after re-weighting at steps 5, 10 and 15: replica 2 gets fewer rows=$dir/adaptive.json@17"
