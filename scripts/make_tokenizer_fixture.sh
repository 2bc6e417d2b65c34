#!/usr/bin/env bash
# Regenerates the tokenizer's committed fixture in tests/fixtures/text/ (needs the fortunes
# packages, bench/.venv-hf from bench/install-hf-tokenizers.sh, and bin/dpcore in BUILD):
#   vocab.txt               `dpcore vocab --data fortunes-lang --vocab-size 3000`
#   sample_texts.jsonl      hand-made cases and a sample of the corpus (make_tokenizer_fixture.py)
#   sample_hf_tokens.jsonl  Hugging Face's tokens of each (tests/data/hf_wordpiece.py)
#   scripts/make_tokenizer_fixture.sh [BUILD]   (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=tests/fixtures/text
mkdir -p $out
"$build/bin/dpcore" vocab --data fortunes-lang --vocab-size 3000 --out $out/vocab.txt
bench/.venv-hf/bin/python scripts/make_tokenizer_fixture.py /usr/share/games/fortunes $out/sample_texts.jsonl
bench/.venv-hf/bin/python tests/data/hf_wordpiece.py $out/vocab.txt $out/sample_texts.jsonl $out/sample_hf_tokens.jsonl
wc -l $out/sample_texts.jsonl
