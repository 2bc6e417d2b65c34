#!/usr/bin/env bash
# docs/scaling.md's predictions for the GPU presets, beside the published anchors:
#   - ResNet-50, 32 images per V100, on v100x8-nvlink-ib100: its profile from PyTorch's
#     model and PyTorch's own DDP benchmark (scripts/make_resnet50_profile.py); the anchors
#     are that benchmark's 93% per-GPU efficiency at 16 GPUs (and 3.8% slower with 1 MiB
#     buckets) and the DDP paper's ~90% at 32 to 256 GPUs;
#   - fashioncnn (batch 64) and vggs (batch 256) on h200x8-nvlink-ib400: dpcore's CPU
#     profile (the order and spacing of the gradients) scaled to PyTorch's step on one H200
#     in graph mode, 330 us and 1480 us (../shared/reference/pytorch-h200.md, measured
#     2026-11-29), standing in for a step dpcore has not yet been timed at on the H200.
#   scripts/predict_gpu_presets.sh [BUILD_DIR [RESULTS_DIR]]   (defaults: build, bench/results/scaling)
# Writes RESULTS_DIR/predict-*.json, then scripts/plot_scaling.py draws docs/images/scaling.png.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
results=${2:-bench/results/scaling}
dpcore="$build/bin/dpcore"
mkdir -p "$results"
counts=1,2,4,8,16,32,64,128,256,512,1024

[ -f "$results/resnet50-v100.json" ] || /usr/bin/python3 scripts/make_resnet50_profile.py "$results/resnet50-v100.json"
"$dpcore" predict --profile "$results/resnet50-v100.json" --cluster v100x8-nvlink-ib100 --strategies ddp,dp,local:8 \
  --replicas "$counts" --json "$results/predict-resnet50-v100.json"
"$dpcore" predict --profile "$results/resnet50-v100.json" --cluster v100x8-nvlink-ib100 --strategies ddp \
  --replicas 1,16 --bucket-mb 1 --json "$results/predict-resnet50-v100-bucket1.json" > /dev/null

h200() {  # model input batch anchor_us
  local model=$1 input=$2 batch=$3 anchor_us=$4
  local profile="$results/$model-cpu-b$batch.json"
  [ -f "$profile" ] || "$dpcore" predict --model "$model" --input "$input" --batch "$batch" --replicas 1 \
    --strategies ddp --cluster 1,1,1,1,1 --profile-out "$profile" > /dev/null
  local scale
  scale=$(/usr/bin/python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); print(float(sys.argv[2]) * 1e-6 / (p["forward_s"] + p["backward_s"] + p["optimizer_s"]))' "$profile" "$anchor_us")
  "$dpcore" predict --model "$model" --input "$input" --batch "$batch" --profile "$profile" \
    --cluster h200x8-nvlink-ib400 --strategies ddp,dp,local:8 --compute-scale "$scale" --replicas "$counts" \
    --json "$results/predict-$model-h200.json"
}
h200 fashioncnn 1x28x28 64 330
h200 vggs 3x32x32 256 1480
/usr/bin/python3 scripts/plot_scaling.py "$results" docs/images/scaling.png
