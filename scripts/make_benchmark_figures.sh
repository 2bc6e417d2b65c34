#!/usr/bin/env bash
# Measures what the benchmark figures of docs/benchmarks.md ("Figures") show, writes the raw
# results to RESULTS_DIR, then draws the figures (scripts/plot_benchmarks.py):
#   step.json        bench/compare_cpu.py: dpcore's step against Debian's PyTorch 1.13 and
#                    the current one of bench/.venv (bench/install-torch.sh), per model and
#                    thread count, alternating rounds          -> docs/images/bench-step-ratio.png
#   busbw-*.json     comm_bench (Google Benchmark JSON): allreduce by message size, the local
#                    ring with 2 and 4 replicas, mpi with 2 and 4 processes (4 oversubscribe
#                    a 2-core machine; rank 0's file)         -> docs/images/bench-busbw.png
#   ddp.jsonl        dpcore_ddp_overlap_bench, one JSON line per run: DDP's hidden fraction of
#                    the allreduce with every bucket (the first too) capped at each size, 2
#                    replicas, alternating the sizes in rounds -> docs/images/bench-ddp-hidden.png
#   machine.txt      date, CPU model, cores, memory, kernel, BLAS and the OpenBLAS variables,
#                    both PyTorch versions, the tree measured
#   load.txt         the load average (1, 5, 15 min) before and after each measurement
#
#   scripts/make_benchmark_figures.sh [--quick] [--only step|busbw|ddp] [BUILD_DIR [RESULTS_DIR]]
#       (defaults: build, bench/results/figures; BUILD_DIR holds bench/dpcore_step_bench,
#        bench/comm_bench, bench/dpcore_ddp_overlap_bench and libdpcore.so)
#   --quick: a few steps and one round of everything, to try the scripts (not for the docs).
#   --only PART: measure that part again, keeping the others' results (load.txt and
#   machine.txt get its lines appended).
# The binaries and libdpcore are copied to a temporary directory first, so that a rebuild of
# BUILD_DIR during the run changes nothing. No GPU is used (comm_bench's nccl rows need one).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0 only=
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
if [ "${1:-}" = --only ]; then only=$2; shift 2; fi
part() { [ -z "$only" ] || [ "$only" = "$1" ]; }
build=${1:-build}
results=${2:-bench/results/figures}
scripts/install-deps.sh --pictures  # Debian's python3-matplotlib
bench/install-torch.sh               # the current PyTorch beside Debian's 1.13

if [ "$quick" = 1 ]; then
  step_rounds=1 step_steps=(--steps 3) comm_reps=1 comm_min=(--benchmark_min_time=0.01) ddp_rounds=1 ddp_steps=3
  models=(simplenet fashioncnn) ddp_models=(fashioncnn) caps=(0.0625 2)
else
  step_rounds=5 step_steps=() comm_reps=5 comm_min=() ddp_rounds=5 ddp_steps=20
  models=(simplenet fashioncnn vggs resnet8 resnet20) ddp_models=(fashioncnn resnet20)
  caps=(0.015625 0.03125 0.0625 0.125 0.25 0.5 1 2)
fi

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
for b in dpcore_step_bench comm_bench dpcore_ddp_overlap_bench; do cp "$build/bench/$b" "$bin/"; done
cp -P "$build"/libdpcore.so* "$bin/"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # before the binaries' RUNPATH
export OMP_WAIT_POLICY=passive  # as compare_cpu.py sets it (docs/benchmarks.md says why)

mkdir -p "$results"
if [ -z "$only" ]; then : > "$results/load.txt"; : > "$results/machine.txt"; fi
[ -z "$only" ] || echo "--only $only:" >> "$results/machine.txt"
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "cores: $(nproc) ($(grep -o -m1 -w 'avx512f' /proc/cpuinfo || echo 'no avx512f'))"
  echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "kernel: $(uname -sr); $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "openblas: $(dpkg-query -W -f='${Version}' libopenblas0 2>/dev/null || echo '?')"
  echo "openblas_env: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}"
  for python in /usr/bin/python3 bench/.venv/bin/python; do
    echo "pytorch: $("$python" -c 'import torch; print(torch.__version__)') ($python)"
  done
  echo "mpi: $(mpiexec --version 2>/dev/null | head -1)"
  echo "checkout: $(git rev-parse --short HEAD) ($(git status --porcelain --untracked-files=no | wc -l) files changed)"
  echo "build: $build ($(grep -m1 '^CMAKE_BUILD_TYPE:' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2)," \
       "sources $(grep -m1 '^CMAKE_HOME_DIRECTORY:' "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2))"
} | tee -a "$results/machine.txt"

load() { echo "$1 $2 $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%H:%M:%S)" >> "$results/load.txt"; }

# 1. The step, dpcore against PyTorch, 1 and 2 threads.
if part step; then
echo "== step: ${models[*]}, threads 1 2, $step_rounds rounds"
load step before
/usr/bin/python3 bench/compare_cpu.py --bench "$bin/dpcore_step_bench" --threads 1 2 --rounds "$step_rounds" \
  "${step_steps[@]}" --models "${models[@]}" --json "$results/step.json" 2>&1 | tee "$results/step.log"
load step after
fi

# 2. Allreduce bus bandwidth: local (in-process) ring, then mpi. Open MPI as ctest runs it:
# no single-copy transport, oversubscription allowed (4 ranks on 2 cores), root allowed.
if part busbw; then
echo "== allreduce: local ring, 2 and 4 replicas"
load busbw-local before
"$bin/comm_bench" --benchmark_filter='^allreduce/local/cpu/' --benchmark_repetitions="$comm_reps" --benchmark_color=false \
  "${comm_min[@]}" --benchmark_out="$results/busbw-local.json" --benchmark_out_format=json \
  | tee "$results/busbw-local.log"
load busbw-local after
for np in 2 4; do
  echo "== allreduce: mpi, $np processes"
  load "busbw-mpi-$np" before
  rm -f "$results"/busbw-mpi-"$np".rank*.json
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 600 mpiexec -n "$np" -x LD_LIBRARY_PATH -x OMP_WAIT_POLICY \
    sh -c 'exec "$0" --benchmark_filter="^allreduce/mpi/" --benchmark_repetitions="$1" --benchmark_color=false \
             --benchmark_out="$2.rank$OMPI_COMM_WORLD_RANK.json" --benchmark_out_format=json' \
    "$bin/comm_bench" "$comm_reps" "$results/busbw-mpi-$np" | tee "$results/busbw-mpi-$np.log" \
    || echo "mpi with $np processes failed or timed out: see $results/busbw-mpi-$np.log"
  if [ -f "$results/busbw-mpi-$np.rank0.json" ]; then
    mv "$results/busbw-mpi-$np.rank0.json" "$results/busbw-mpi-$np.json"
  fi
  rm -f "$results"/busbw-mpi-"$np".rank*.json
  load "busbw-mpi-$np" after
done
fi

# 3. DDP's hidden fraction against the bucket cap (all buckets, the first included), 2
# replicas; the caps in rounds, so that a change of load hits every cap alike.
if part ddp; then
echo "== ddp: ${ddp_models[*]}, buckets capped at ${caps[*]} MiB, $ddp_rounds rounds"
load ddp before
: > "$results/ddp.jsonl"
for round in $(seq "$ddp_rounds"); do
  for model in "${ddp_models[@]}"; do
    for cap in "${caps[@]}"; do
      out=$("$bin/dpcore_ddp_overlap_bench" --model "$model" --replicas 2 --steps "$ddp_steps" \
            --bucket-mb "$cap" --first-bucket-mb "$cap")
      echo "$out" | sed -n 1p
      echo "$out" | tail -1 | sed "s/^{/{\"round\":$round,/" >> "$results/ddp.jsonl"
    done
  done
  load "ddp-round-$round" after
done
fi

images=docs/images
[ "$quick" = 1 ] && images=$results  # a try's pictures stay out of the docs
/usr/bin/python3 scripts/plot_benchmarks.py "$results" "$images" | tee "$results/tables.md"
