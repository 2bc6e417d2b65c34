#!/usr/bin/env bash
# Installs everything dpcore needs from Debian's packages. Idempotent: packages
# already present are left alone, so this is cheap to run before every build.
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev   # tests and micro-benchmarks
  libopenblas-dev                               # CPU matrix products
  libcli11-dev nlohmann-json3-dev zlib1g-dev    # CLI flags, JSON (safetensors headers, metrics), gzip datasets
  libopenmpi-dev openmpi-bin                    # the mpi communicator and launcher
  clang-14 libclang-rt-14-dev                   # libFuzzer for the parser fuzz tests
  dataset-fashion-mnist                         # the real dataset the main job trains on
  python3-torch python3-numpy                   # PyTorch 1.13 (CPU): parity fixtures and the CPU benchmark
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "dpcore: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
