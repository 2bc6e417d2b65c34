"""Writes the texts of the tokenizer's committed fixture, tests/fixtures/text/sample_texts.jsonl
(one JSON string per line): hand-made cases of each rule of BERT's basic tokenization, then
every 97th entry of every fortune file (a sample of all languages; the readers' own rules are
not needed for a sample). Run by scripts/make_tokenizer_fixture.sh."""
import json
import os
import sys

CASES = [
    "Héllo, WORLD! naïve café résumé Ångström Å Straße",
    "日本語のテキスト 中文 한국어 ﾊﾝｶｸ",
    "ΟΔΟΣ ΟΔΟΣ. ὁδός ΣΑΣ Σ",
    "İstanbul I\u0307 ǅ titlecase 𝐁𝐨𝐥𝐝",
    "tab\there\nnew\r\nline\x0bvt\x0cff",
    "zero\u200bwidth soft\u00adhyphen a\u2028b\u2029c nbsp\u00a0here\u3000ideographic",
    "ctrl\x01\x07chars\x1b[0m NUL\x00byte replacement\ufffdchar del\x7f",
    "x" * 101,
    "supercalifragilistic" * 5,
    "[MASK] and [CLS] in text, [mask] lower, [SEP][PAD][UNK]",
    "emoji 😀 🎉 ﬁ ligature",
    "$100 @home #tag ~tilde `back` ^caret |pipe| {brace} <angle>",
    "«guillemets» „quotes“ — dash… ¿qué? ¡sí!",
    "\u0301alone o\u0308 combining e\u0301\u0301",
    "",
    "   ",
    "فارسی عربی שלום हिन्दी",
    "_\bU_\bn_\bd_\be_\br overstrike",
]


def fortune_files(root):
    for folder, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            path = os.path.join(folder, name)
            if not name.endswith((".dat", ".u8")) and not os.path.islink(path):
                yield path


def main(root, out_path):
    texts = list(CASES)
    for path in fortune_files(root):
        with open(path, "rb") as f:
            entries = f.read().decode("utf-8").split("\n%\n")
        texts.extend(entry.strip("\n") for entry in entries[::97] if entry.strip())
    with open(out_path, "w", encoding="utf-8") as out:
        for text in texts:
            out.write(json.dumps(text, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
