#!/usr/bin/env bash
# The measurements behind docs/scaling.md's check of `dpcore predict` on this machine:
#   1. the links: comm_bench's allreduce over the local ring (2, 3 and 4 in-process
#      replicas) and over MPI (mpirun -np 2, 3 and 4), from which scripts/check_scaling.py
#      fits alpha and beta;
#   2. one replica's step profile (dpcore predict --profile-out), 1 kernel thread, with the
#      busy slowdown of 2 copies at once (the machine's 2 cores);
#   3. the real steps: dpcore_step_bench with R = 2..4 replicas of 1 kernel thread each and
#      64 samples per replica (weak scaling, as the model assumes), --mode ddp and dp over
#      the local ring, and --mode ddp over MPI with one rank per replica; each between two
#      one-replica steps (the machine's speed drifts by 10-30% within a minute: the
#      prediction of R replicas starts from the one replica measured just before and just
#      after, their geometric mean).
# Parts 2 and 3 run ROUNDS times (default 3), one after the other, so that a slow spell of
# the machine shows up in a round's profile and its steps alike.
#   scripts/measure_scaling.sh [BUILD_DIR [RESULTS_DIR]]   (defaults: build, bench/results/scaling)
# Then scripts/check_scaling.py RESULTS_DIR predicts the same steps and prints the table.
# Run it on a quiet machine: the load average before and after each part goes to load.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
results=${2:-bench/results/scaling}
model=${MODEL:-fashioncnn}
steps=${STEPS:-40}
rounds=${ROUNDS:-3}
cores=$(getconf _NPROCESSORS_ONLN)
mkdir -p "$results"
machine="$(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $cores cores"
export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
# Open MPI as root, more ranks than cores, ranks that yield while they wait for a message
# (otherwise 4 polling ranks on 2 cores starve each other), no kernel-assisted copies
# (containers forbid them).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
load() { echo "$1 $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/load.txt"; }
echo "$machine" > "$results/load.txt"
# Every rank would print its report: rank 0's is kept.
rank0() { mpirun -np "$1" sh -c '[ "$OMPI_COMM_WORLD_RANK" = 0 ] && exec "$0" "$@"; exec "$0" "$@" > /dev/null' "${@:2}"; }

load "comm local before"
"$build/bench/comm_bench" --benchmark_filter='^allreduce/local/cpu' --benchmark_min_time=0.3 \
  --benchmark_format=json > "$results/comm-local.json"
for n in 2 3 4; do
  load "comm mpi $n before"
  rank0 $n "$build/bench/comm_bench" --benchmark_filter='^allreduce/mpi' --benchmark_format=json > "$results/comm-mpi-$n.json"
done

bench() {  # round backend mode replicas [baseline]: for R > 1, one replica before and after R
  local round=$1 backend=$2 mode=$3 r=$4
  [ "$r" -gt 1 ] && bench "$round" local ddp 1 "before $backend-$mode-$r"
  local flags=(--model "$model" --threads 1 --batch $((64 * r)) --replicas "$r" --mode "$mode" --backend "$backend"
               --steps "$steps" --warmup 5)
  load "round $round step $backend $mode $r before"
  if [ "$backend" = mpi ]; then
    rank0 "$r" "$build/bench/dpcore_step_bench" "${flags[@]}"
  else
    "$build/bench/dpcore_step_bench" "${flags[@]}"
  fi | /usr/bin/python3 -c 'import json,sys; j=json.loads(sys.stdin.readline()); j.update(round=int(sys.argv[1]), backend=sys.argv[2], mode=sys.argv[3], baseline=sys.argv[4]); print(json.dumps(j))' \
    "$round" "$backend" "$mode" "${5:-}" >> "$results/steps.jsonl"
  [ "$r" -gt 1 ] && bench "$round" local ddp 1 "after $backend-$mode-$r"
  return 0
}
: > "$results/steps.jsonl"
rm -f "$results"/profile-*.json
for round in $(seq 1 "$rounds"); do
  load "round $round profile before"
  "$build/bin/dpcore" predict --model "$model" --batch 64 --threads 1 --profile-steps "$steps" --replicas 1 \
    --strategies ddp --cluster "1,1,1,1,1,$cores" --profile-out "$results/profile-$round.json" > /dev/null
  for r in 2 3 4; do bench "$round" local ddp $r; done
  for r in 2 3 4; do bench "$round" local dp $r; done
  for r in 2 3 4; do bench "$round" mpi ddp $r; done
done
load "end"
echo "measured into $results: $(wc -l < "$results/steps.jsonl") step benchmarks"
