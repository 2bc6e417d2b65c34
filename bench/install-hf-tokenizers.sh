#!/usr/bin/env bash
# Makes bench/.venv-hf (git-ignored): Debian's Python with Hugging Face's transformers and
# tokenizers, every package pinned (bench/hf-tokenizers-requirements.txt, pip freeze of the
# install), for the tokenizer's comparison on the whole corpus (tests/data/wordpiece_test.cpp,
# WordPieceVsHuggingFace.WholeCorpus, which runs when this venv exists) and for regenerating
# its committed fixture (scripts/make_tokenizer_fixture.sh). No torch: the tokenizers need none.
# Idempotent: an existing venv with the pinned versions is left alone.
#   bench/install-hf-tokenizers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --bench  # python3-venv
venv=bench/.venv-hf
requirements=bench/hf-tokenizers-requirements.txt
[ -x $venv/bin/python ] || /usr/bin/python3 -m venv $venv
if ! $venv/bin/pip freeze 2> /dev/null | diff -q - $requirements > /dev/null; then
  echo "bench/install-hf-tokenizers.sh: $requirements into $venv (pip's output: $venv/pip.log)"
  $venv/bin/pip install --progress-bar off -r $requirements > $venv/pip.log 2>&1 \
    || { tail -n 20 $venv/pip.log >&2; echo "bench/install-hf-tokenizers.sh: pip failed, the whole output is in $venv/pip.log" >&2; exit 1; }
fi
$venv/bin/python -c "import transformers, tokenizers; print('bench/.venv-hf: transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"
