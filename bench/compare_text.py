#!/usr/bin/python3
"""BERT sequence classification on real text, dpcore against each PyTorch of --torch-python
(Debian's 1.13 and, once bench/install-torch.sh has made bench/.venv, the current one),
side by side: the same token ids, the same model, the same recipe, whole training runs
alternating (dpcore, each PyTorch, dpcore, ...), so that load from other work hits all.

    /usr/bin/python3 bench/compare_text.py --data fortunes-lang --epochs 2
    /usr/bin/python3 bench/compare_text.py --data fortunes-topic --model minilm --epochs 1
    /usr/bin/python3 bench/compare_text.py --data fortunes-topic --model minilm --epochs 1 \
        --pytorch-model transformers --torch-python bench/.venv-transformers/bin/python

The input: `dpcore tokenize` writes both splits as the ids `dpcore train` feeds its model
(the same reading, split, WordPiece tokenizer and truncation), and the PyTorch side trains
on exactly those: batches of --batch texts in a seeded order per epoch (torch's generator,
not dpcore's: the orders differ, the law is the same), padded to the batch's longest text,
the attention mask ids != [PAD].

The model: tests/layers/torch_bert.py, the torch.nn twin of transformers'
BertForSequenceClassification (scripts/check_bert_twin.py checks it against transformers),
initialised as transformers' _init_weights does (normal(0, initializer_range) for linear and
embedding weights, the padding row and biases zero, LayerNorm 1 and 0), or, with --model
minilm, all-MiniLM-L6-v2's weights (scripts/get_minilm.sh) with a fresh classifier, as
dpcore's --init-from loads them. With --pytorch-model transformers, transformers' own
BertForSequenceClassification instead (its own initialisation), for a --torch-python that
has transformers (bench/install-transformers.sh makes bench/.venv-transformers).

The recipe, dpcore's flags and their PyTorch: AdamW (lr --lr, betas 0.9/0.999, eps 1e-8,
weight decay 0.01 except biases and LayerNorm weights, Hugging Face's grouping), the linear
schedule with --warmup-steps of warm-up (get_linear_schedule_with_warmup), dropout 0.1,
the mean cross-entropy, no gradient clipping, float32, --threads threads and
OMP_WAIT_POLICY=passive. Each epoch's training is timed on the wall clock (dpcore's
epoch breakdown, its `wall_s`; the PyTorch loop from its first batch to its last step,
batching included), then the test split is evaluated (not timed).

Prints per run and epoch the test accuracy and the epoch's seconds, then per PyTorch the
accuracy difference and the epoch speed ratio; --json writes it all with the machine.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from machine import default_torch_pythons, describe, record  # noqa: E402

MODELS = {
    # dpcore's presets (layers/transformer/bert.cpp) as BertConfig fields; vocab and labels
    # come from the data.
    "bert-tiny": {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512},
    "bert-mini": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024},
    # all-MiniLM-L6-v2 (scripts/get_minilm.sh): its own vocabulary and weights.
    "minilm": {"num_hidden_layers": 6, "hidden_size": 384, "num_attention_heads": 12, "intermediate_size": 1536},
}
MINILM_DIR = os.path.join(ROOT, "data", "minilm")


def read_header(path):
    """The JSON header of a safetensors file: each tensor's dtype and shape, and "__metadata__"."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))


def read_tokens(path):
    """{split: (list of id lists, labels)} and the metadata of `dpcore tokenize`'s file."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from make_fixtures import load_safetensors
    tensors = load_safetensors(path)
    meta = read_header(path)["__metadata__"]
    splits = {}
    for split in ("train", "test"):
        ids, offsets = tensors[f"{split}.ids"], tensors[f"{split}.offsets"].tolist()
        texts = [ids[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
        splits[split] = (texts, tensors[f"{split}.labels"].to(torch.int64))
    return splits, meta


def padded(texts, rows, pad_id):
    """The texts `rows` as one [B, T] batch padded to its longest, and the attention mask."""
    import torch
    longest = max(len(texts[r]) for r in rows)
    x = torch.full((len(rows), longest), pad_id, dtype=torch.int64)
    for i, r in enumerate(rows):
        x[i, :len(texts[r])] = texts[r]
    return x, (x != pad_id).to(torch.int64)


def init_weights(model, config):
    """transformers' BertPreTrainedModel._init_weights."""
    import torch
    from torch import nn
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, config.initializer_range)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, config.initializer_range)
                if m.padding_idx is not None:
                    m.weight[m.padding_idx].zero_()
            elif isinstance(m, nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()


def logits_of(output):
    """The twin returns the logits; transformers' model an output object holding them."""
    return output if hasattr(output, "argmax") else output.logits


def torch_worker(args):
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "tests", "layers"))
    import torch_bert
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from make_fixtures import load_safetensors

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    splits, meta = read_tokens(args.tokens)
    pad_id, classes = int(meta["pad_id"]), json.loads(meta["classes"])
    fields = dict(vocab_size=int(meta["vocab_size"]), num_labels=len(classes), pad_token_id=pad_id, **MODELS[args.model])
    version = torch.__version__
    if args.pytorch_model == "transformers":
        import transformers
        model = transformers.BertForSequenceClassification(transformers.BertConfig(**fields))  # its own init
        version += f" + transformers {transformers.__version__}"
    else:
        config = torch_bert.Config(**fields)
        model = torch_bert.BertForSequenceClassification(config)
        init_weights(model, config)
    if args.init_from:
        loaded = load_safetensors(args.init_from)
        missing, unexpected = model.load_state_dict({k: v for k, v in loaded.items() if k in model.state_dict()},
                                                    strict=False)
        if {m for m in missing if not m.endswith("position_ids")} - {"classifier.weight", "classifier.bias"}:
            sys.exit(f"compare_text: {args.init_from} lacks {sorted(missing)}")
    decay, no_decay = torch_bert.decay_groups(model)  # by parameter name: the same for transformers' model
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    train_texts, train_labels = splits["train"]
    test_texts, test_labels = splits["test"]
    steps_per_epoch = math.ceil(len(train_texts) / args.batch)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, torch_bert.linear_schedule_with_warmup(args.warmup_steps, steps_per_epoch * args.epochs))
    order_generator = torch.Generator().manual_seed(args.seed)
    for epoch in range(1, args.epochs + 1):
        model.train()
        order = torch.randperm(len(train_texts), generator=order_generator).tolist()
        total_loss = 0.0
        start = time.perf_counter()
        for b in range(steps_per_epoch):
            rows = order[b * args.batch:(b + 1) * args.batch]
            x, mask = padded(train_texts, rows, pad_id)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(logits_of(model(input_ids=x, attention_mask=mask)), train_labels[rows])
            loss.backward()
            opt.step()
            sched.step()
            total_loss += loss.item() * len(rows)
        seconds = time.perf_counter() - start
        model.eval()
        correct = 0
        with torch.no_grad():
            for b in range(0, len(test_texts), 256):
                rows = list(range(b, min(b + 256, len(test_texts))))
                x, mask = padded(test_texts, rows, pad_id)
                logits = logits_of(model(input_ids=x, attention_mask=mask))
                correct += int((logits.argmax(-1) == test_labels[rows]).sum())
        print(json.dumps({"engine": "pytorch", "version": version, "epoch": epoch, "seconds": seconds,
                          "samples_per_s": len(train_texts) / seconds, "train_loss": total_loss / len(train_texts),
                          "test_accuracy": correct / len(test_texts)}), flush=True)


def dpcore_model(args, meta):
    if args.model != "minilm":
        return args.model
    c = MODELS["minilm"]
    return (f"bert(layers={c['num_hidden_layers']},hidden={c['hidden_size']},heads={c['num_attention_heads']},"
            f"intermediate={c['intermediate_size']},vocab={meta['vocab_size']},max_len=512,"
            f"labels={len(json.loads(meta['classes']))})")


def run_dpcore(args, env, meta, workdir):
    metrics = os.path.join(workdir, "dpcore.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.dpcore, "train", "--model", dpcore_model(args, meta), "--data", args.data, "--truncate",
           "--max-len", str(args.max_len), "--optimizer", "adamw", "--lr", str(args.lr), "--lr-schedule", "linear",
           "--warmup-steps", str(args.warmup_steps), "--batch", str(args.batch), "--epochs", str(args.epochs),
           "--device", "cpu", "--threads", str(args.threads), "--seed", str(args.seed), "--metrics", metrics]
    cmd += dpcore_text_flags(args)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"compare_text: dpcore failed:\n{done.stdout}\n{done.stderr}")
    with open(metrics) as f:
        epochs = [json.loads(line) for line in f if line.strip()]
    return [{"engine": "dpcore", "epoch": e["epoch"], "seconds": e["wall_s"], "samples_per_s": e["samples_per_s"],
             "train_loss": e["train_loss"], "test_accuracy": e["test_accuracy"]} for e in epochs]


def dpcore_text_flags(args):
    flags = []
    if args.model == "minilm":
        flags += ["--init-from", os.path.join(MINILM_DIR, "minilm.safetensors"),
                  "--vocab", os.path.join(MINILM_DIR, "vocab.txt")]
    return flags


def run_torch(args, env, python, tokens):
    cmd = [python, os.path.abspath(__file__), "--torch-worker", "--tokens", tokens, "--model", args.model,
           "--threads", str(args.threads), "--epochs", str(args.epochs), "--batch", str(args.batch), "--lr",
           str(args.lr), "--warmup-steps", str(args.warmup_steps), "--seed", str(args.seed),
           "--pytorch-model", args.pytorch_model]
    if args.model == "minilm":
        cmd += ["--init-from", os.path.join(MINILM_DIR, "minilm.safetensors")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"compare_text: PyTorch ({python}) failed:\n{done.stdout}\n{done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def describe_run(epochs):
    return ", ".join(f"epoch {e['epoch']} {100 * e['test_accuracy']:.2f}% in {e['seconds']:.1f} s" for e in epochs)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dpcore", default=os.path.join(ROOT, "build", "bin", "dpcore"))
    p.add_argument("--data", default="fortunes-lang")
    p.add_argument("--model", default="bert-tiny", choices=sorted(MODELS))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--max-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=None, help="default 5e-4 (from scratch) or 5e-5 (minilm)")
    p.add_argument("--warmup-steps", type=int, default=None, help="default 10%% of the first epoch's steps")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--torch-python", nargs="+", default=default_torch_pythons(), metavar="PYTHON",
                   help="the interpreters whose PyTorch to compare with (default: %(default)s)")
    p.add_argument("--pytorch-model", default="twin", choices=["twin", "transformers"],
                   help="PyTorch's model: tests/layers/torch_bert.py's twin (default), or transformers' own "
                        "BertForSequenceClassification (a --torch-python with transformers: bench/install-transformers.sh)")
    p.add_argument("--json", help="write the runs and the machine here")
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tokens", help=argparse.SUPPRESS)
    p.add_argument("--init-from", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.lr is None:
        args.lr = 5e-5 if args.model == "minilm" else 5e-4
    if args.torch_worker:
        return torch_worker(args)
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    machine = record(args.torch_python)
    print(describe(machine))
    with tempfile.TemporaryDirectory() as workdir:
        tokens = os.path.join(workdir, "tokens.safetensors")
        cmd = [args.dpcore, "tokenize", "--data", args.data, "--max-len", str(args.max_len), "--truncate",
               "--out", tokens]
        if args.model == "minilm":
            cmd += ["--vocab", os.path.join(MINILM_DIR, "vocab.txt")]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"compare_text: {' '.join(cmd)} failed:\n{done.stdout}{done.stderr}")
        header = read_header(tokens)
        meta = header["__metadata__"]
        if args.warmup_steps is None:
            args.warmup_steps = max(1, math.ceil(header["train.labels"]["shape"][0] / args.batch) // 10)
        print(f"{args.model} on {args.data} (max length {args.max_len}, {meta['vocab_size']}-token vocabulary), "
              f"batch {args.batch}, AdamW lr {args.lr}, linear schedule, {args.warmup_steps} warm-up steps, "
              f"{args.epochs} epochs, {args.threads} threads")
        print(f"load average before: {os.getloadavg()}")
        runs = []
        for r in range(args.rounds):
            d = run_dpcore(args, env, meta, workdir)
            runs.append({"round": r + 1, "engine": "dpcore", "epochs": d})
            print(f"round {r + 1}: dpcore: {describe_run(d)}", flush=True)
            for python in args.torch_python:
                t = run_torch(args, env, python, tokens)
                runs.append({"round": r + 1, "engine": "pytorch", "python": python, "version": t[0]["version"],
                             "epochs": t})
                print(f"round {r + 1}: PyTorch {t[0]['version']}: {describe_run(t)}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    dpcore_runs = [run for run in runs if run["engine"] == "dpcore"]
    for python in args.torch_python:
        theirs = [run for run in runs if run.get("python") == python]
        version = theirs[0]["version"]
        accuracy = [100 * (d["epochs"][-1]["test_accuracy"] - t["epochs"][-1]["test_accuracy"])
                    for d, t in zip(dpcore_runs, theirs)]
        speed = [t_e["seconds"] / d_e["seconds"] for d, t in zip(dpcore_runs, theirs)
                 for d_e, t_e in zip(d["epochs"], t["epochs"])]
        print(f"against PyTorch {version}: final test accuracy dpcore minus PyTorch {statistics.median(accuracy):+.2f} "
              f"points; epoch speed dpcore / PyTorch {statistics.median(speed):.2f}x "
              f"(min {min(speed):.2f}, max {max(speed):.2f}, over {len(speed)} epochs)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "args": {k: v for k, v in vars(args).items() if k not in
                                                     ("torch_worker", "tokens", "init_from")}, "runs": runs}, f,
                      indent=1)


if __name__ == "__main__":
    main()
