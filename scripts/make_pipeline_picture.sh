#!/usr/bin/env bash
# Regenerates docs/images/pipeline-bubbles.png (docs/pipelines.md, "Watching a pipeline"):
# GPipe above 1F1B for 4 stages and 8 micro-batches, from traces recorded by
# `dpcore train --trace` on the real Fashion-MNIST. The model is a multilayer perceptron
# whose four stages do about the same work (235k-240k multiply-adds a sample each), so that
# the schedule, not one slow layer, shapes the bubble; on a machine of 2 cores the stages
# share them (cpu:0 and cpu:1, two stages each). Prints the measured bubbles.
#   scripts/make_pipeline_picture.sh [BUILD_DIR]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --pictures  # Debian's python3-matplotlib
build=${1:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model="flatten linear(300) relu linear(800) relu linear(300) relu linear(800) relu linear(10)"
stages="0-2@cpu:0,3-4@cpu:1,5-6@cpu:0,7-10@cpu:1"
for schedule in gpipe 1f1b; do
  OMP_WAIT_POLICY=passive "$build/bin/dpcore" train --data fashion-mnist --model "$model" --device cpu --batch 256 \
    --stages "$stages" --schedule "$schedule" --micro-batches 8 --steps 12 --trace-steps 10 --progress 0 \
    --trace "$dir/$schedule.json"
done
mkdir -p docs/images
/usr/bin/python3 scripts/plot_pipeline.py --out docs/images/pipeline-bubbles.png \
  --title "4 stages ($stages) of a 4-layer perceptron on Fashion-MNIST, batch 256 in 8 micro-batches, 2 cores" \
  --trace="GPipe: all 8 forwards, then all 8 backwards=$dir/gpipe.json" \
  --trace="1F1B: after the warm-up, one forward then one backward=$dir/1f1b.json"
