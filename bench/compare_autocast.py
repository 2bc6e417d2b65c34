#!/usr/bin/python3
"""dpcore's --precision bf16 against torch.autocast on the CPU, step by step (issue 27).

The same run on both sides: the same initial weights (written by dpcore), the real
Fashion-MNIST training images in file order as pixels / 255 (dpcore --no-shuffle
--no-normalize), or for bert-tiny fortunes-topic's texts in file order as the token ids
`dpcore tokenize` writes (each batch padded to its longest text, dropout off on both sides,
the twin of tests/layers/torch_bert.py on PyTorch's), SGD with momentum, one thread. dpcore prints every step's mean loss
(--log-every 1); the PyTorch loop computes the same step as bench/torch_models.py's
make_step: its forward and loss under torch.autocast("cpu", torch.bfloat16), the backward
outside it. Each model
runs in float32 and in bfloat16 on both sides, so the table shows beside the difference
between the two bfloat16 runs the difference that bfloat16 itself makes.

What bounds the difference between the two bfloat16 runs (docs/mixed-precision.md): both
round the same operands to bfloat16 (the convolutions' and linear layers' inputs and
weights) and accumulate in float32, both round those ops' outputs once to bfloat16, and
both keep the activations after them bfloat16 (relu, pooling, batch norm, residual adds,
GELU, tanh, each computed in float32 and rounded once). Where they differ:
  * the order of the float32 sums inside each product, which moves a rounded output by one
    bfloat16 ulp where the float32 sum lies next to a rounding boundary;
  * the CNNs' log-softmax: PyTorch's CPU autocast computes it on the bfloat16 logits and
    keeps its output bfloat16 before the float32 nll_loss, where dpcore widens the logits
    and computes log-softmax and the loss in float32: one rounding (2^-8 relative) fewer;
  * bert-tiny's attention: PyTorch rounds the scores (its Q K^T is a bfloat16 matmul) and
    the probabilities (its CPU autocast keeps softmax bfloat16), where dpcore's attention
    op computes both in float32 from the rounded Q, K and V: two roundings fewer per layer
    (bert-tiny's loss is cross_entropy on its logits, float32 on both sides).
Neither is a rounding that the autocast policy itself does not make already, so the two
bfloat16 runs, each a perturbation of the float32 run the two sides share, must agree with
each other at least as well as bfloat16 moves either of them away from float32:
    max over steps |L_dpcore,bf16 - L_torch,bf16|
        <= max over steps of the larger of |L_torch,bf16 - L_torch,fp32|, |L_dpcore,bf16 - L_dpcore,fp32|
and at the first step (same weights, only those placements differ) within a bfloat16 unit
roundoff of the loss, 2^-8 |L|, per rounding placed differently (1 in the CNNs, 4 in
bert-tiny). The script prints the table and exits 1 where a bound fails.

    /usr/bin/python3 bench/compare_autocast.py --dpcore build/bin/dpcore --models fashioncnn resnet8 bert-tiny --steps 50
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

FASHION = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist (gzipped IDX)
BATCH, LR, MOMENTUM = 64, 0.03, 0.9
# Roundings PyTorch's autocast places where dpcore stays in float32 (above). The CNNs take
# Fashion-MNIST's 1 x 28 x 28 images and round where dpcore does but in their log-softmax.
# bert-tiny (2 layers) takes fortunes-topic's token ids: per layer PyTorch rounds the
# attention scores and the probabilities, which dpcore's attention op keeps float32; the
# residual adds meet float32 tensors on both sides (PyTorch promotes).
EXTRA_ROUNDINGS = {"fashioncnn": 1, "resnet8": 1, "bert-tiny": 2 * 2}
# bert-tiny (layers/transformer/bert.cpp's preset) without dropout, so both sides compute the
# same function: the twin's masks would not be dpcore's.
BERT_TINY = "bert(layers=2,hidden=128,heads=2,intermediate=512,vocab=3000,labels=10,dropout=0)"
TEXT = ["--data", "fortunes-topic", "--truncate", "--max-len", "64"]
# The ResNets come with training defaults (cli --model): plain SGD here, as on PyTorch's side.
PLAIN_SGD = ["--weight-decay", "0", "--nesterov=false", "--lr-schedule", "constant", "--warmup-steps", "0"]


def data_and_model(model):
    """dpcore's --data and --model flags for `model`."""
    return TEXT + ["--model", BERT_TINY] if model == "bert-tiny" else ["--data", "fashion-mnist", "--model", model]


def dpcore_losses(args, model, precision, init, out_dir):
    cmd = [args.dpcore, "train"] + data_and_model(model) + ["--device", "cpu", "--threads", "1",
           "--progress", "0", "--no-shuffle", "--no-normalize", "--batch", str(BATCH), "--steps", str(args.steps),
           "--lr", str(LR), "--momentum", str(MOMENTUM), "--init", init, "--log-every", "1",
           "--precision", precision, "--save", os.path.join(out_dir, f"{model}-{precision}.safetensors")] + PLAIN_SGD
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stdout}{done.stderr}")
    losses = [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+ +epoch \d+ +loss ([0-9.]+)", done.stdout, re.M)]
    if len(losses) != args.steps:
        sys.exit(f"expected {args.steps} step lines from dpcore, got {len(losses)}:\n{done.stdout}")
    return losses


def bert_batches(args, out_dir):
    """fortunes-topic's first args.steps batches in file order as dpcore --no-shuffle makes
    them: `dpcore tokenize`'s ids, each batch padded to its longest text, the mask ids != [PAD]
    (compare_text.py's reading and padding)."""
    from compare_text import padded, read_tokens

    path = os.path.join(out_dir, "topic.safetensors")
    done = subprocess.run([args.dpcore, "tokenize"] + TEXT + ["--out", path], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"dpcore tokenize failed:\n{done.stdout}{done.stderr}")
    splits, meta = read_tokens(path)
    texts, labels = splits["train"]
    batches = []
    for step in range(args.steps):
        rows = list(range(step * BATCH, (step + 1) * BATCH))
        x, mask = padded(texts, rows, int(meta["pad_id"]))
        batches.append((x, mask, labels[rows]))
    return batches


def torch_bert_losses(args, precision, init, out_dir):
    import torch
    from make_fixtures import load_safetensors
    sys.path.insert(0, os.path.join(ROOT, "tests", "layers"))
    import torch_bert

    torch.set_num_threads(1)
    config = torch_bert.Config(vocab_size=3000, num_labels=10, num_hidden_layers=2, hidden_size=128,
                               num_attention_heads=2, intermediate_size=512, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0)
    net = torch_bert.BertForSequenceClassification(config)
    net.load_state_dict(load_safetensors(init), strict=True)
    net.train()
    sgd = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for x, mask, y in bert_batches(args, out_dir):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = torch.nn.functional.cross_entropy(net(input_ids=x, attention_mask=mask).float(), y)
        losses.append(loss.item())
        sgd.zero_grad(set_to_none=True)
        loss.backward()
        sgd.step()
    return losses


def torch_losses(args, model, precision, init, out_dir):
    if model == "bert-tiny":
        return torch_bert_losses(args, precision, init, out_dir)
    import gzip

    import numpy as np
    import torch
    from make_fixtures import load_safetensors
    from torch_models import build_torch_model

    def idx(name):
        with gzip.open(os.path.join(FASHION, name)) as f:
            data = f.read()
        dims = data[3]
        shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
        return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)

    torch.set_num_threads(1)
    images = torch.from_numpy(idx("train-images-idx3-ubyte.gz").astype(np.float32) / 255).unsqueeze(1)
    labels = torch.from_numpy(idx("train-labels-idx1-ubyte.gz").astype(np.int64))
    net = build_torch_model(model)
    net.load_state_dict(load_safetensors(init), strict=True)
    net.train()
    sgd = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for step in range(args.steps):
        x, y = images[step * BATCH:(step + 1) * BATCH], labels[step * BATCH:(step + 1) * BATCH]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = torch.nn.functional.nll_loss(net(x), y)
        losses.append(loss.item())
        sgd.zero_grad(set_to_none=True)
        loss.backward()
        sgd.step()
    return losses


def compare(args, model, out_dir):
    import torch

    init = os.path.join(out_dir, f"{model}-init.safetensors")
    cmd = [args.dpcore, "train"] + data_and_model(model) + ["--device", "cpu", "--threads", "1",
           "--progress", "0", "--steps", "1", "--lr", "0", "--save", init] + PLAIN_SGD
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stdout}{done.stderr}")
    runs = {(side, p): (dpcore_losses(args, model, p, init, out_dir) if side == "dpcore" else
                        torch_losses(args, model, p, init, out_dir))
            for side in ("dpcore", "torch") for p in ("fp32", "bf16")}
    print(f"\n{model}: batch {BATCH}, SGD lr {LR} momentum {MOMENTUM}, {args.steps} steps, 1 thread, "
          f"PyTorch {torch.__version__}")
    print(f"{'step':>4} {'dpcore fp32':>12} {'torch fp32':>12} {'dpcore bf16':>12} {'torch bf16':>12} "
          f"{'|bf16 diff|':>12} {'|bf16-fp32|':>12}")
    both, policy, own = [], [], []
    for t in range(args.steps):
        d32, t32, d16, t16 = (runs[k][t] for k in (("dpcore", "fp32"), ("torch", "fp32"), ("dpcore", "bf16"),
                                                    ("torch", "bf16")))
        both.append(abs(d16 - t16))
        policy.append(abs(t16 - t32))
        own.append(abs(d16 - d32))
        if t < 5 or t % 10 == 9:
            print(f"{t + 1:>4} {d32:>12.4f} {t32:>12.4f} {d16:>12.4f} {t16:>12.4f} {both[-1]:>12.2e} {policy[-1]:>12.2e}")
    fp32_diff = max(abs(a - b) for a, b in zip(runs[("dpcore", "fp32")], runs[("torch", "fp32")]))
    first_bound = EXTRA_ROUNDINGS[model] * 2.0 ** -8 * runs[("torch", "bf16")][0]
    # dpcore prints 4 decimals: half a unit of the last one is part of every difference.
    printed = 0.5e-4
    ok_first = both[0] <= first_bound + printed
    effect = max(max(policy), max(own))
    ok_all = max(both) <= effect + printed
    print(f"float32: dpcore against PyTorch, largest difference over the steps {fp32_diff:.2e} (4 printed decimals)")
    print(f"bfloat16: first step {both[0]:.2e} (bound {first_bound:.2e}: {'ok' if ok_first else 'FAILED'}); "
          f"largest over the steps {max(both):.2e}, against bfloat16's own effect {effect:.2e} "
          f"(PyTorch's {max(policy):.2e}, dpcore's {max(own):.2e}) "
          f"({'ok' if ok_all else 'FAILED'})")
    return ok_first and ok_all


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dpcore", default="build/bin/dpcore", help="the dpcore command")
    p.add_argument("--models", nargs="+", default=["fashioncnn", "resnet8", "bert-tiny"], choices=sorted(EXTRA_ROUNDINGS))
    p.add_argument("--steps", type=int, default=50)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as out_dir:
        ok = [compare(args, m, out_dir) for m in args.models]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
