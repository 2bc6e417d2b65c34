"""Hugging Face's BERT tokenizers on texts, for the tokenizer tests (tests/data/wordpiece_test.cpp).

    hf_wordpiece.py VOCAB IN.jsonl OUT.jsonl

IN has one JSON string per line; OUT gets, per text, one JSON object: the WordPiece tokens of
transformers' Python BertTokenizerLegacy (BasicTokenizer + WordpieceTokenizer, the rules
dpcore follows) as "legacy" and its BasicTokenizer's words (no vocabulary involved) as
"basic"; the same of the Rust `tokenizers` backend (transformers' BertTokenizer: its
normalizer and pre-tokenizer for the words) as "fast" and "fast_basic", written only where
they differ from the Python ones. All uncased, accents stripped. Runs with bench/.venv-hf's Python
(bench/install-hf-tokenizers.sh)."""
import json
import sys

from transformers import BertTokenizer
from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer, BertTokenizerLegacy


def main(vocab, texts_path, out_path):
    legacy = BertTokenizerLegacy(vocab, do_lower_case=True)
    basic = BasicTokenizer(do_lower_case=True)
    fast = BertTokenizer(vocab, do_lower_case=True)
    backend = fast.backend_tokenizer

    def fast_basic(text):
        return [word for word, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(text))]

    with open(texts_path, encoding="utf-8") as texts, open(out_path, "w", encoding="utf-8") as out:
        for line in texts:
            text = json.loads(line)
            result = {"legacy": legacy.tokenize(text), "basic": basic.tokenize(text)}
            fast_tokens, fast_words = fast.tokenize(text), fast_basic(text)
            if fast_tokens != result["legacy"]:
                result["fast"] = fast_tokens
            if fast_words != result["basic"]:
                result["fast_basic"] = fast_words
            out.write(json.dumps(result, ensure_ascii=False))
            out.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
