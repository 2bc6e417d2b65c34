#!/usr/bin/python3
"""PyTorch parity fixtures for dpcore's reference models (shared/reference/models.md).

Usage (Debian's python3-torch is visible only to /usr/bin/python3):

    /usr/bin/python3 scripts/make_fixtures.py
        writes tests/fixtures/{simplenet,fashioncnn,vggs}.safetensors. Deterministic:
        running it again produces byte-identical files.

    /usr/bin/python3 scripts/make_fixtures.py --check-load FILE MODEL
        loads a safetensors file written by dpcore into the PyTorch MODEL with
        load_state_dict(strict=True) and runs a forward pass. Besides the parameters the
        file may hold `input` and `logits`; then the forward output on `input` must match
        `logits` to 1e-5. Exits non-zero with a message naming the problem otherwise.

Initial weights. PyTorch's own initialisation cannot be reproduced outside PyTorch (it
draws from its Mersenne-Twister stream), and storing the weights does not fit the 2 MB
the fixtures may take (fashioncnn and vggs have about 0.4M parameters each, 1.7 MB per
copy). So every parameter is filled from a formula that the C++ twin
tests/support/fixture_weights.h computes bit for bit, with PyTorch's default distribution
U(-1/sqrt(fan_in), 1/sqrt(fan_in)), for weights and biases alike:

    splitmix64(x): z = x + 0x9E3779B97F4A7C15; z = (z ^ z>>30) * 0xBF58476D1CE4E5B9;
                   z = (z ^ z>>27) * 0x94D049BB133111EB; return z ^ z>>31   (all mod 2^64)
    stream = splitmix64(splitmix64(seed) ^ t)   t = the parameter's index in state_dict order
    bits_i = splitmix64(stream + i)             i = flat (row-major) element index, mod 2^64
    u_i    = (bits_i >> 11) * 2^-53             a double in [0, 1)
    w_i    = float32(bound * (2 * u_i - 1))     bound = 1 / sqrt(fan_in) in double

2*u_i - 1 is exact, so each value is rounded twice (the product, then to float32) on
both sides, identically. The seed is INIT_SEED, stored in the metadata as init_seed.

Sampled tensors. A parameter-sized tensor (params, grad, after3, accum3) with more than
FULL_LIMIT elements is stored as a 1-D sample of its row-major elements flat[0::stride]:
stride is the smallest integer >= ceil(numel / SAMPLE_TARGET) that shares no factor with
numel, so the sample walks across all rows and, as the row length divides numel, through
different columns in each row. The stride is stored in the metadata as
sample_stride.<param>; tests compare a full result against the same sample.

Each tests/fixtures/<model>.safetensors holds (B = 6 samples, float32 unless noted):
    input [B,C,H,W], target [B] int64, logits [B,10] (the log_softmax output),
    loss [] (NLL, mean over the batch),
    params.<p>   initial parameters (from the formula above)
    grad.<p>     d loss / d p at the initial parameters
    after3.<p>   parameters after 3 SGD steps on the whole batch: lr 0.1, momentum 0.9,
                 dampening 0, nesterov, weight_decay 0.01, zero_grad before each step
    accum3.<p>   parameters after ONE SGD step (lr 0.1, momentum 0.9) that accumulates the
                 gradients of 3 micro-batches of 2 samples, each loss divided by 3; the
                 script checks this equals one step on the whole batch (to 1e-6)
and __metadata__ with these hyperparameters as strings.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

INIT_SEED = 1
DATA_SEED = 0
BATCH = 6
ACCUM = 3
FULL_LIMIT = 32768
SAMPLE_TARGET = 8192
AFTER3 = dict(lr=0.1, momentum=0.9, dampening=0.0, nesterov=True, weight_decay=0.01)
ACCUM3 = dict(lr=0.1, momentum=0.9, dampening=0.0, nesterov=False, weight_decay=0.0)
ACCUM_TOLERANCE = 1e-6
CHECK_LOAD_TOLERANCE = 1e-5

FIXTURE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")


class FixtureError(Exception):
    """A problem with a file or a check; main() prints it and exits with status 1."""


# ---------------------------------------------------------------------------------------
# The reference models, exactly as models.md writes them: one definition for every script
# (bench/torch_models.py).
# ---------------------------------------------------------------------------------------

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from torch_models import INPUT, build_torch_model  # noqa: E402




# ---------------------------------------------------------------------------------------
# Deterministic initialisation and sampling (twin: tests/support/fixture_weights.h).
# numpy uint64 arithmetic wraps modulo 2^64, which is what splitmix64 needs.
# ---------------------------------------------------------------------------------------

def splitmix64(x):
    x = np.asarray(x, dtype=np.uint64)
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def formula_values(seed, tensor_index, numel, fan_in):
    stream = splitmix64(splitmix64(np.array([seed], dtype=np.uint64)) ^ np.uint64(tensor_index))
    bits = splitmix64(stream + np.arange(numel, dtype=np.uint64))
    u = (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53
    bound = 1.0 / math.sqrt(fan_in)
    return (bound * (2.0 * u - 1.0)).astype(np.float32)


def fan_in(param_name, model):
    """fan_in of the layer owning the parameter: in_channels*3*3 (conv) or in_features."""
    layer = getattr(model, param_name.split(".")[0])
    return layer.weight[0].numel()


def init_with_formula(model):
    with torch.no_grad():
        for t, (name, p) in enumerate(model.named_parameters()):
            values = formula_values(INIT_SEED, t, p.numel(), fan_in(name, model))
            p.copy_(torch.from_numpy(values).view(p.shape))


def sample_stride(numel):
    if numel <= FULL_LIMIT:
        return 1
    stride = -(-numel // SAMPLE_TARGET)
    while math.gcd(stride, numel) != 1:
        stride += 1
    return stride


def sampled(t):
    stride = sample_stride(t.numel())
    return t.detach() if stride == 1 else t.detach().reshape(-1)[::stride].contiguous()


# ---------------------------------------------------------------------------------------
# safetensors, written and read by the letter of the format (the `safetensors` package is
# not packaged for Debian; it is used when installed).
# ---------------------------------------------------------------------------------------

DTYPES = {"F32": (torch.float32, "<f4"), "F64": (torch.float64, "<f8"),
          "I32": (torch.int32, "<i4"), "I64": (torch.int64, "<i8")}
DTYPE_NAMES = {torch_dtype: name for name, (torch_dtype, _) in DTYPES.items()}
MAX_HEADER_BYTES = 100_000_000


def save_safetensors(tensors, path, metadata):
    try:
        import safetensors.torch
    except ImportError:
        pass
    else:
        safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=metadata)
        return
    header = {"__metadata__": metadata} if metadata else {}  # the reference writer omits it when empty
    chunks, offset = [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().astype(DTYPES[DTYPE_NAMES[t.dtype]][1]).tobytes()
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the buffer starts 8-byte aligned, as the reference writer does
    temp = path + ".tmp"
    with open(temp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


def reject_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    duplicates = {k for k in keys if keys.count(k) > 1}
    if duplicates:
        raise ValueError(f"the key(s) {sorted(duplicates)} appear more than once")
    return dict(pairs)


def parse_header(path, blob):
    if len(blob) < 8:
        raise FixtureError(f"{path}: {len(blob)} bytes, fewer than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER_BYTES or n > len(blob) - 8:
        raise FixtureError(f"{path}: header length {n} is impossible for a {len(blob)}-byte file")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"), object_pairs_hook=reject_duplicate_keys)
    except ValueError as e:  # includes UnicodeDecodeError
        raise FixtureError(f"{path}: invalid header: {e}")
    if not isinstance(header, dict):
        raise FixtureError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FixtureError(f"{path}: __metadata__ must map strings to strings")
    return n, header


def load_safetensors(path):
    """Returns {name: tensor}, validating the file as the reference implementation does."""
    try:
        import safetensors.torch
    except ImportError:
        pass
    else:
        return safetensors.torch.load_file(path)
    with open(path, "rb") as f:
        blob = f.read()
    n, header = parse_header(path, blob)
    buffer = blob[8 + n:]
    entries = []
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise FixtureError(f"{path}: tensor '{name}' needs dtype, shape and data_offsets [begin, end]")
        if dtype not in DTYPES:
            raise FixtureError(f"{path}: tensor '{name}' has dtype {dtype!r}; dpcore writes only {sorted(DTYPES)}")
        counts = (shape if isinstance(shape, list) else [None]) + [begin, end]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts):
            raise FixtureError(f"{path}: tensor '{name}' has a shape or data_offsets entry that is not a non-negative integer")
        nbytes = math.prod(shape) * np.dtype(DTYPES[dtype][1]).itemsize
        if not begin <= end <= len(buffer) or end - begin != nbytes:
            raise FixtureError(f"{path}: tensor '{name}' data_offsets [{begin}, {end}] do not fit shape {shape} "
                               f"of {dtype} in a {len(buffer)}-byte buffer")
        entries.append((begin, end, name, dtype, shape))
    covered = 0
    for begin, end, name, _, _ in sorted(entries):
        if begin != covered:
            raise FixtureError(f"{path}: tensor '{name}' starts at byte {begin}, expected {covered} "
                               f"(tensors must tile the buffer without gaps or overlaps)")
        covered = end
    if covered != len(buffer):
        raise FixtureError(f"{path}: the last {len(buffer) - covered} bytes of the buffer belong to no tensor")
    return {name: torch.from_numpy(np.frombuffer(buffer, DTYPES[dtype][1], math.prod(shape), begin).copy())
            .to(DTYPES[dtype][0]).view(shape) for begin, _, name, dtype, shape in entries}


# ---------------------------------------------------------------------------------------
# Fixture generation
# ---------------------------------------------------------------------------------------

def fresh_model(name, initial):
    model = build_torch_model(name)
    model.load_state_dict(initial, strict=True)
    return model


def sgd_steps(model, batches, steps, hyper, loss_scale=1.0):
    """`steps` optimizer steps; each zeroes the gradients once, then accumulates the batches."""
    opt = torch.optim.SGD(model.parameters(), **hyper)
    for _ in range(steps):
        opt.zero_grad()
        for x, y in batches:
            (F.nll_loss(model(x), y) * loss_scale).backward()
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def check_accumulation(name, accumulated, full_batch):
    for p, value in accumulated.items():
        diff = (value - full_batch[p]).abs().max().item()
        if diff > ACCUM_TOLERANCE:
            raise FixtureError(f"{name}: accumulating {ACCUM} micro-batches changed {p} by {diff:.3g} "
                               f"compared with one step on the whole batch (tolerance {ACCUM_TOLERANCE})")


def fixture_tensors(name):
    model = build_torch_model(name)
    init_with_formula(model)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}

    gen = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(BATCH, *INPUT[name], generator=gen)
    y = torch.randint(0, 10, (BATCH,), generator=gen)

    logits = model(x)
    loss = F.nll_loss(logits, y)
    loss.backward()

    after3 = sgd_steps(fresh_model(name, initial), [(x, y)], 3, AFTER3)
    micro = BATCH // ACCUM
    micro_batches = [(x[i:i + micro], y[i:i + micro]) for i in range(0, BATCH, micro)]
    accum3 = sgd_steps(fresh_model(name, initial), micro_batches, 1, ACCUM3, loss_scale=1.0 / ACCUM)
    check_accumulation(name, accum3, sgd_steps(fresh_model(name, initial), [(x, y)], 1, ACCUM3))

    tensors = {"input": x, "target": y, "logits": logits.detach(), "loss": loss.detach()}
    for prefix, values in [("params", initial), ("grad", {n: p.grad for n, p in model.named_parameters()}),
                           ("after3", after3), ("accum3", accum3)]:
        tensors.update({f"{prefix}.{p}": sampled(v) for p, v in values.items()})
    return tensors, metadata(name, initial)


def metadata(name, initial):
    def text(v):
        return str(v).lower() if isinstance(v, bool) else str(v)

    meta = {"model": name, "batch": text(BATCH), "accum": text(ACCUM), "init_seed": text(INIT_SEED),
            "init": "splitmix64 uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), see scripts/make_fixtures.py",
            "after3.steps": "3", "accum3.steps": "1", "accum3.micro_batch": text(BATCH // ACCUM),
            "sample_limit": text(FULL_LIMIT)}
    meta.update({f"after3.{k}": text(v) for k, v in AFTER3.items()})
    meta.update({f"accum3.{k}": text(v) for k, v in ACCUM3.items()})
    meta.update({f"sample_stride.{p}": text(sample_stride(v.numel())) for p, v in initial.items()
                 if v.numel() > FULL_LIMIT})
    return meta


def make_fixtures():
    os.makedirs(FIXTURE_DIR, exist_ok=True)
    for name in INPUT:
        tensors, meta = fixture_tensors(name)
        path = os.path.normpath(os.path.join(FIXTURE_DIR, f"{name}.safetensors"))
        save_safetensors(tensors, path, meta)
        print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


# ---------------------------------------------------------------------------------------
# --check-load: does a file written by dpcore load into the PyTorch model?
# ---------------------------------------------------------------------------------------

def check_load(path, name):
    tensors = load_safetensors(path)
    x, expected = tensors.pop("input", None), tensors.pop("logits", None)
    model = build_torch_model(name)
    want = model.state_dict()
    missing, unexpected = sorted(want.keys() - tensors.keys()), sorted(tensors.keys() - want.keys())
    if missing or unexpected:
        raise FixtureError(f"{path}: does not match {name}'s state_dict: missing {missing}, unexpected {unexpected}")
    for p, t in tensors.items():
        if t.dtype != torch.float32 or t.shape != want[p].shape:
            raise FixtureError(f"{path}: tensor '{p}' is {DTYPE_NAMES.get(t.dtype, t.dtype)} {list(t.shape)}, "
                               f"{name} needs F32 {list(want[p].shape)}")
    model.load_state_dict(tensors, strict=True)

    if expected is not None and x is None:
        raise FixtureError(f"{path}: has logits but no input to reproduce them from")
    if x is None:
        x = torch.randn(2, *INPUT[name], generator=torch.Generator().manual_seed(DATA_SEED))
    with torch.no_grad():
        out = model(x)
    if not torch.isfinite(out).all():
        raise FixtureError(f"{path}: the forward pass of {name} produced non-finite values")
    if expected is not None:
        if expected.shape != out.shape:
            raise FixtureError(f"{path}: logits have shape {list(expected.shape)}, the model gives {list(out.shape)}")
        diff = (out - expected).abs().max().item()
        if diff > CHECK_LOAD_TOLERANCE:
            raise FixtureError(f"{path}: PyTorch's forward pass differs from the file's logits by {diff:.3g} "
                               f"(tolerance {CHECK_LOAD_TOLERANCE})")
    print(f"{path}: loads into {name} (strict), forward output {list(out.shape)}"
          + (", matches logits" if expected is not None else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check-load", nargs=2, metavar=("FILE", "MODEL"),
                        help=f"load FILE into MODEL ({', '.join(INPUT)}) and run a forward pass")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        if args.check_load:
            path, name = args.check_load
            if name not in INPUT:
                raise FixtureError(f"unknown model '{name}' (known: {', '.join(INPUT)})")
            check_load(path, name)
        else:
            make_fixtures()
    except (FixtureError, OSError, RuntimeError) as e:  # RuntimeError: torch refused an input
        sys.exit(f"make_fixtures.py: {e}")


if __name__ == "__main__":
    main()
