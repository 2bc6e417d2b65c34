#!/usr/bin/env bash
# Installs everything dpcore needs from Debian's packages. Idempotent: packages
# already present are left alone, so this is cheap to run before every build (it prints
# nothing when there is nothing to do).
#
# Quiet: one line per step. apt's own output goes to a log file, a fresh
# ${TMPDIR:-/tmp}/dpcore-install-deps.XXXXXX.log named in the first line (outside the tree,
# so that a run as root leaves nothing root-owned in the checkout), and is shown (its last
# lines, and its path) only when a step fails. Runs as root, or as a user with sudo.
#   scripts/install-deps.sh [--train | --bench | --pictures]
set -euo pipefail

# What configures and builds dpcore (CMake's configure step needs every one of them: a
# library found later would change the build's configuration and recompile it) and what
# the main job trains on.
packages=(
  cmake g++ make pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev   # tests and micro-benchmarks (found at configure)
  libopenblas-dev                               # CPU matrix products
  libcli11-dev nlohmann-json3-dev zlib1g-dev    # CLI flags, JSON (safetensors headers, metrics), gzip datasets
  libturbojpeg0-dev libpng-dev                  # JPEG (TurboJPEG API) and PNG decoding: --data imagefolder:DIR
  libopenmpi-dev openmpi-bin                    # the mpi communicator and launcher
  dataset-fashion-mnist                         # the real dataset the main job trains on
  libutf8proc-dev                               # Unicode normal forms and categories (the tokenizer)
  fortunes fortunes-de fortunes-es fortunes-it fortunes-pl fortunes-ru fortunes-cs \
    fortunes-br fortunes-eo fortunes-bg fortunes-ga  # the text corpus (docs/text.md)
)
# What only the tests run (left out by --train, i.e. scripts/train.sh): found later, they
# add test targets to an existing build/ and change nothing already compiled.
test_packages=(
  clang-14 libclang-rt-14-dev                   # libFuzzer for the parser fuzz tests
  python3-torch python3-numpy                   # PyTorch 1.13 (CPU): parity fixtures and the CPU benchmark
  python3-pil python3-torchvision               # the decoders' and ImageFolder's references; scripts/make_imagefolder.py
)
case "${1:-}" in
  --train) ;;
  # --pictures: also what regenerates the docs' figures (scripts/make_timelines.sh), which
  # the build and the tests do not need.
  --pictures) packages+=("${test_packages[@]}" python3-matplotlib) ;;
  # --bench: also what makes bench/.venv, the current PyTorch beside Debian's (bench/install-torch.sh).
  --bench) packages+=("${test_packages[@]}" python3-venv) ;;
  "") packages+=("${test_packages[@]}") ;;
  *) echo "scripts/install-deps.sh: unknown option $1 (expected --train, --bench or --pictures)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -gt 0 ] || exit 0

# apt-get as root. sudo resets the environment, so DEBIAN_FRONTEND goes through env(1);
# a password prompt, if any, still reaches the terminal (sudo asks on /dev/tty).
if [ "$(id -u)" -eq 0 ]; then
  as_root=(env DEBIAN_FRONTEND=noninteractive)
elif command -v sudo > /dev/null; then
  as_root=(sudo env DEBIAN_FRONTEND=noninteractive)
else
  echo "dpcore: missing packages (${missing[*]}) and not root, and sudo is not installed: run $0 as root" >&2
  exit 1
fi
apt_options=(-q -o Dpkg::Use-Pty=0 -o APT::Color=0)

log=$(mktemp "${TMPDIR:-/tmp}/dpcore-install-deps.XXXXXX.log")

# step DESCRIPTION COMMAND...: one line, the command's output to the log; on failure, the
# log's tail and path, and the command's exit status.
step() {
  local what=$1
  shift
  echo "dpcore: $what"
  echo "=== $what: $*" >> "$log"
  local status=0
  "$@" >> "$log" 2>&1 < /dev/null || status=$?
  if [ "$status" -ne 0 ]; then
    {
      echo "dpcore: failed (exit $status): ${what% ...}. The last lines of $log:"
      tail -n 30 "$log" | sed 's/^/  | /'
      echo "dpcore: the whole output is in $log"
    } >&2
    exit "$status"
  fi
}

count="${#missing[@]} package$([ ${#missing[@]} -eq 1 ] || echo s)"
echo "dpcore: $count missing; apt's output goes to $log"
step "apt-get update ..." "${as_root[@]}" apt-get "${apt_options[@]}" update
step "installing $count: ${missing[*]} ..." \
  "${as_root[@]}" apt-get "${apt_options[@]}" install -y --no-install-recommends "${missing[@]}"
echo "dpcore: installed $count"
