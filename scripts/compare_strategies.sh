#!/usr/bin/env bash
# The comparison of docs/strategies.md: fashioncnn on the real Fashion-MNIST, 4 CPU
# replicas (threads of one process, 1 kernel thread each), 3 epochs, batch 64, lr 0.03,
# momentum 0.9, seed 0, the test set evaluated every 128 steps; each --sync strategy
#   full, local:4, local:16, async, and async with momentum 0.5,
# once as is and once with replica 1 slowed 3x (--inject slow:replica=1,factor=3), where
# --split adaptive is also run as the synchronous answer. Then the plots.
#   scripts/compare_strategies.sh [BUILD_DIR [RESULTS_DIR]]   (defaults: build, bench/results/strategies)
# Each run's metrics go to RESULTS_DIR/SCENARIO--NAME.jsonl, its log beside it, and the
# load average before and after each run to RESULTS_DIR/load.txt. A run whose metrics
# already hold its 3 epochs is kept (delete the file to run it again).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --pictures  # Debian's python3-matplotlib
build=${1:-build}
results=${2:-bench/results/strategies}
mkdir -p "$results"
touch "$results/load.txt"

run() {  # scenario name flags...
  local scenario=$1 name=$2
  shift 2
  local stem="$results/$scenario--$name"
  if [ -f "$stem.jsonl" ] && [ "$(grep -c '"kind":"epoch"' "$stem.jsonl")" = 3 ]; then
    echo "== $scenario / $name: kept from an earlier run ($stem.jsonl)"
    return
  fi
  echo "== $scenario / $name: $*"
  echo "$scenario--$name before $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/load.txt"
  rm -f "$stem.jsonl"
  OMP_WAIT_POLICY=passive "$build/bin/dpcore" train --model fashioncnn --data fashion-mnist --device cpu \
    --replicas 4 --threads 1 --epochs 3 --batch 64 --lr 0.03 --seed 0 --eval-every 128 \
    --progress 0 --metrics "$stem.jsonl" "$@" > "$stem.log" 2>&1
  tail -1 "$stem.log"
  echo "$scenario--$name after $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/load.txt"
}

for scenario in equal slowed; do
  slow=()
  [ "$scenario" = slowed ] && slow=(--inject slow:replica=1,factor=3)
  run "$scenario" full --sync full --momentum 0.9 "${slow[@]}"
  if [ "$scenario" = slowed ]; then run "$scenario" full-adaptive --sync full --split adaptive --momentum 0.9 "${slow[@]}"; fi
  run "$scenario" local-4 --sync local:4 --momentum 0.9 "${slow[@]}"
  run "$scenario" local-16 --sync local:16 --momentum 0.9 "${slow[@]}"
  run "$scenario" async --sync async --momentum 0.9 "${slow[@]}"
  run "$scenario" async-momentum-0.5 --sync async --momentum 0.5 "${slow[@]}"
done
/usr/bin/python3 scripts/plot_strategies.py "$results" docs/images/strategies.png
