#!/usr/bin/env bash
# Makes bench/.venv (git-ignored): Debian's Python with a current PyTorch, pinned, beside
# Debian's PyTorch 1.13, for the CPU comparisons (bench/compare_cpu.py, compare_epoch.py),
# which run each PyTorch they find. A benchmark dependency only: no test needs it.
#
# From PyPI, the one Python index reachable here. PyPI serves Linux x86-64 only the CUDA
# build of torch (about 2.3 GiB installed with its NVIDIA libraries); the CPU-only wheel is
# not on PyPI. The CUDA build runs on the CPU without a GPU, with its own OpenMP and
# its own CPU kernels (oneDNN, MKL), whatever OPENBLAS_* say. Idempotent: an existing venv
# with the pinned versions is left alone. Ends by importing torch and timing a resnet8 step.
#   bench/install-torch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=2.15.0  # the newest on PyPI, 2026-12-01
NUMPY=2.4.6   # compare_epoch.py reads the IDX files with it
scripts/install-deps.sh --bench  # python3-venv, and Debian's 1.13 to compare with
venv=bench/.venv
[ -x $venv/bin/python ] || /usr/bin/python3 -m venv $venv
if ! $venv/bin/python -c "import torch, numpy, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH' or numpy.__version__ != '$NUMPY')" 2> /dev/null; then
  echo "bench/install-torch.sh: torch==$TORCH numpy==$NUMPY into $venv (pip's output: $venv/pip.log)"
  $venv/bin/pip install --progress-bar off "torch==$TORCH" "numpy==$NUMPY" > $venv/pip.log 2>&1 \
    || { tail -n 20 $venv/pip.log >&2; echo "bench/install-torch.sh: pip failed, the whole output is in $venv/pip.log" >&2; exit 1; }
fi
# The check: one resnet8 training step (batch 128, 2 threads) of bench/torch_models.py.
cd bench
../$venv/bin/python - <<'PY'
import time
import torch
from torch_models import build_torch_model, make_step, random_batch, sgd
torch.set_num_threads(2)
torch.manual_seed(0)
model = build_torch_model("resnet8")
x, y = random_batch("resnet8", 128, "cpu", 0)
step = make_step(model, sgd(model), x, y, 1)
step()
start = time.perf_counter()
step()
print(f"bench/.venv: PyTorch {torch.__version__} on the CPU, resnet8 batch 128, 2 threads: "
      f"a step in {(time.perf_counter() - start) * 1e3:.0f} ms")
PY
