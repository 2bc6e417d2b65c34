#!/usr/bin/env bash
# Times the two commands of the README on a fresh clone, back to back, as a new user runs
# them: scripts/train.sh (install, build the library and the dpcore command, train), then
# scripts/test.sh (install the test packages, build the rest, run every test). Prints a
# table: the time to the first step (until dpcore prints the run's plan, just before step
# 1), the training, each command in all, and both. Run it on a fresh machine for the
# install times; where the packages are there already, install-deps.sh takes no time.
#   scripts/time_first_run.sh [--train-only] [TRAIN ARGUMENTS...]   (default: the 3-epoch job)
# The clone is of this checkout's HEAD (commit first), in a new folder under ${TMPDIR:-/tmp},
# kept with the two logs (named at the end). $DPCORE_CMAKE_ARGS goes through to both.
set -euo pipefail
source_dir=$(cd "$(dirname "$0")/.." && pwd)
run_tests=yes
if [ "${1:-}" = --train-only ]; then
  run_tests=no
  shift
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/dpcore-first-run.XXXXXX")
git clone -q --no-local "$source_dir" "$work/dpcore"
cd "$work/dpcore"

now() { date +%s.%N; }
seconds() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }
minutes() { awk -v s="$1" 'BEGIN { printf "%dm%02ds", s / 60, s % 60 }'; }

# train.sh with its output in train.log, and the moment its first line from dpcore (the
# plan: "dpcore: MODEL on DATA ..., N replicas on DEVICE") appears in first_step.
start=$(now)
if ! scripts/train.sh "$@" 2>&1 | while IFS= read -r line; do
  printf '%s\n' "$line" >> "$work/train.log"
  if [ ! -e "$work/first_step" ] && [[ $line == "dpcore: "*" replica"*" on "* ]]; then
    now > "$work/first_step"
  fi
done; then
  echo "scripts/train.sh failed: $work/train.log" >&2
  exit 1
fi
train_end=$(now)
[ -e "$work/first_step" ] || { echo "no plan line from dpcore in $work/train.log" >&2; exit 1; }
first_step=$(cat "$work/first_step")

rows=("before the first step (install, configure, build)|$(seconds "$start" "$first_step")"
      "training (plan line to exit)|$(seconds "$first_step" "$train_end")"
      "scripts/train.sh|$(seconds "$start" "$train_end")")
if [ $run_tests = yes ]; then
  scripts/test.sh > "$work/test.log" 2>&1 || { echo "scripts/test.sh failed: $work/test.log" >&2; exit 1; }
  test_end=$(now)
  rows+=("scripts/test.sh after it|$(seconds "$train_end" "$test_end")"
         "both|$(seconds "$start" "$test_end")")
fi

echo "| $(git log -1 --format='%h %cd' --date=short), $(nproc) cores, DPCORE_CMAKE_ARGS=${DPCORE_CMAKE_ARGS:-} | time |"
echo "|---|---|"
for row in "${rows[@]}"; do
  echo "| ${row%|*} | $(minutes "${row#*|}") (${row#*|} s) |"
done
logs="$work/train.log"
[ $run_tests = no ] || logs+=" $work/test.log"
echo "logs: $logs"
