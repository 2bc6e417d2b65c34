#!/usr/bin/env bash
# Makes bench/.venv-transformers (git-ignored): Debian's Python and its PyTorch 1.13 (the
# venv sees the system packages) with Hugging Face transformers, pinned, for
# scripts/check_bert_twin.py, the benchmark-time check that tests/layers/torch_bert.py (the
# torch.nn twin the CI parity tests use, CI having no transformers) is transformers' BERT.
# transformers 4.30.2 is the newest that runs on PyTorch 1.13 with BERT's eager attention
# (later releases need PyTorch 2). From PyPI. Idempotent: an existing venv with the pinned
# versions is left alone.
#   bench/install-transformers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
TRANSFORMERS=4.30.2
PINS=("transformers==$TRANSFORMERS" "tokenizers==0.13.3" "huggingface-hub==0.36.2" "safetensors==0.8.0")
scripts/install-deps.sh --bench  # python3-venv and Debian's python3-torch
venv=bench/.venv-transformers
[ -x $venv/bin/python ] || /usr/bin/python3 -m venv --system-site-packages $venv
if ! $venv/bin/python -c "import transformers, sys; sys.exit(transformers.__version__ != '$TRANSFORMERS')" 2> /dev/null; then
  echo "bench/install-transformers.sh: ${PINS[*]} into $venv (pip's output: $venv/pip.log)"
  $venv/bin/pip install --progress-bar off "${PINS[@]}" > $venv/pip.log 2>&1 \
    || { tail -n 20 $venv/pip.log >&2; echo "bench/install-transformers.sh: pip failed, the whole output is in $venv/pip.log" >&2; exit 1; }
fi
$venv/bin/python -c "import torch, transformers; print(f'bench/.venv-transformers: transformers {transformers.__version__} on PyTorch {torch.__version__}')"
