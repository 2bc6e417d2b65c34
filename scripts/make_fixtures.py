#!/usr/bin/python3
"""PyTorch parity fixtures for dpcore's reference models (shared/reference/models.md).

Usage (Debian's python3-torch is visible only to /usr/bin/python3):

    /usr/bin/python3 scripts/make_fixtures.py
        writes tests/fixtures/{simplenet,fashioncnn,vggs,resnet8}.safetensors (FIXTURES; resnet8
        with in_channels 1 on 28x28). Deterministic: running it again on the same machine
        produces byte-identical files (another CPU may change the last bits of PyTorch's
        sums, about 1e-7: the committed simplenet, fashioncnn and vggs files were made on
        another machine than the 2-core development one, resnet8's on that one).

    /usr/bin/python3 scripts/make_fixtures.py --check-load FILE MODEL
        loads a safetensors file written by dpcore into the PyTorch MODEL with
        load_state_dict(strict=True) and runs a forward pass. The file must hold exactly the
        model's state_dict: the parameters (F32) and, for the batch-norm models (resnet8,
        resnet20), the buffers too (running_mean and running_var F32, num_batches_tracked
        I64, shape []). Besides those the file may hold `input` and `logits`; then the
        forward output on `input` must match `logits` to 1e-5. The forward pass runs in eval
        mode, so for the batch-norm models `logits` must be the EVAL-mode output (normalised
        with the file's running statistics). Exits non-zero with a message naming the
        problem otherwise.

    /usr/bin/python3 scripts/make_fixtures.py --write-state FILE MODEL [--seed S]
        the other direction, PyTorch to dpcore: builds MODEL as bench/torch_models.py does,
        with its own initialisation (torchvision's for the ResNets) under
        torch.manual_seed(S) (default 0), trains it WRITE_STATE_STEPS = 3 SGD steps (the
        AFTER3 hyper-parameters below) in train mode on a random batch of B samples drawn
        from a generator seeded with S (so the batch-norm buffers move: num_batches_tracked
        3), and writes the full state_dict (parameters F32, running statistics F32,
        num_batches_tracked I64) plus `input` [B,C,H,W] (B further samples from that
        generator) and `logits` [B,10], the EVAL-mode log_softmax output on `input`.
        `--check-load FILE MODEL` accepts the file it writes.

    Both modes take --input-shape C,H,W (default: the model's, 1,28,28 for the ResNets):
    the ResNets are built for C input channels and take any H and W (3,32,32 for
    CIFAR-10); the other models take only their own shape.

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
t counts parameters only (named_parameters() order, which is state_dict order without the
buffers). fan_in = in_channels*k*k for a conv (k = 3, or 1 for a 1x1 downsample conv),
in_features for a linear layer. Batch-norm parameters are not drawn from U(-bound, bound)
but, with b = BN_SPREAD = 0.1 and u_i as above, computed in double and rounded once:

    weight_i = float32(1.0 + b * (2 * u_i - 1))    bias_i = float32(b * (2 * u_i - 1))

(b * (2u - 1) rounds to double, 1.0 + it rounds to double, then to float32), so neither is
trivial. Buffers start at PyTorch's defaults: running_mean 0, running_var 1,
num_batches_tracked 0; the fixtures do not store them.

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

The batch-norm models (resnet8: in_channels 1, 28x28) hold, in this order (<p>: every
parameter in named_parameters() order; <b>: every buffer in named_buffers() order, i.e.
<layer>.running_mean [C], <layer>.running_var [C] F32 and <layer>.num_batches_tracked []
I64 for each BatchNorm2d in state_dict order):
    input [B,1,28,28], target [B] int64,
    logits [B,10]   the log_softmax output in TRAIN mode (batch statistics) at the initial
                    parameters and default buffers
    loss []         NLL of logits, mean over the batch
    eval_logits [B,10]  the log_softmax output on `input` in EVAL mode (running statistics)
                    with the after3.<p> parameters and after3.<b> buffers
    params.<p>      initial parameters (formula above, batch norm by the rule above)
    grad.<p>        d loss / d p at the initial parameters (train mode)
    buffers1.<b>    the buffers after that one train-mode forward pass on the whole batch:
                    running stats moved once (momentum 0.1, unbiased variance),
                    num_batches_tracked 1
    after3.<p>, after3.<b>   parameters and buffers after 3 train-mode SGD steps on the
                    whole batch (the AFTER3 hyper-parameters above; num_batches_tracked 3)
    accum3.<p>, accum3.<b>   parameters and buffers after ONE SGD step (ACCUM3) that
                    accumulates 3 micro-batches of 2 samples, each loss divided by 3, in
                    train mode: each micro-batch is normalised with its OWN statistics and
                    moves the running stats once, in order (num_batches_tracked 3). This is NOT one
                    step on the whole batch; the script checks that it differs from that
                    step by more than ACCUM_BN_DIFFERENCE = 1e-4 somewhere (instead of the
                    equality check above).
Parameters and (never sampled, all small) buffers follow the sampling rule above; their
metadata adds in_channels, batch_norm.momentum, batch_norm.eps, init.batch_norm_spread,
init.batch_norm (the rule in words) and buffers1.steps.
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
ACCUM_BN_DIFFERENCE = 1e-4  # batch norm: accum3 must differ from one whole-batch step by more
BN_SPREAD = 0.1             # batch norm init: weight 1 + b*(2u-1), bias b*(2u-1)
FIXTURES = ["simplenet", "fashioncnn", "vggs", "resnet8"]  # resnet20 has no fixture
CHECK_LOAD_TOLERANCE = 1e-5
WRITE_STATE_STEPS = 3

FIXTURE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")


class FixtureError(Exception):
    """A problem with a file or a check; main() prints it and exits with status 1."""


# ---------------------------------------------------------------------------------------
# The reference models, exactly as models.md writes them: one definition for every script
# (bench/torch_models.py).
# ---------------------------------------------------------------------------------------

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from torch_models import INPUT, RESNET_BLOCKS, build_torch_model  # noqa: E402




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


def formula_values(seed, tensor_index, numel, fan_in, kind="uniform"):
    """kind "uniform": bound*(2u-1), bound = 1/sqrt(fan_in); "bn_weight": 1 + BN_SPREAD*(2u-1);
    "bn_bias": BN_SPREAD*(2u-1) (fan_in unused); each computed in double, rounded to float32 once."""
    stream = splitmix64(splitmix64(np.array([seed], dtype=np.uint64)) ^ np.uint64(tensor_index))
    bits = splitmix64(stream + np.arange(numel, dtype=np.uint64))
    u = (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53
    if kind == "bn_weight":
        return (1.0 + BN_SPREAD * (2.0 * u - 1.0)).astype(np.float32)
    if kind == "bn_bias":
        return (BN_SPREAD * (2.0 * u - 1.0)).astype(np.float32)
    bound = 1.0 / math.sqrt(fan_in)
    return (bound * (2.0 * u - 1.0)).astype(np.float32)


def param_init(param_name, model):
    """(kind, fan_in) of a parameter: ("uniform", in_channels*k*k) for a conv's, ("uniform",
    in_features) for a linear layer's, ("bn_weight" or "bn_bias", 0) for a batch norm's."""
    module_name, leaf = param_name.rsplit(".", 1)
    layer = model.get_submodule(module_name)
    if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm):
        return ("bn_weight" if leaf == "weight" else "bn_bias"), 0
    return "uniform", layer.weight[0].numel()


def init_with_formula(model):
    with torch.no_grad():
        for t, (name, p) in enumerate(model.named_parameters()):
            kind, fan = param_init(name, model)
            values = formula_values(INIT_SEED, t, p.numel(), fan, kind)
            p.copy_(torch.from_numpy(values).view(p.shape))


def has_batch_norm(model):
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


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

DTYPES = {"F32": (torch.float32, "<f4"), "F64": (torch.float64, "<f8"), "F16": (torch.float16, "<f2"),
          "BF16": (torch.bfloat16, "<i2"),  # numpy has no bfloat16: its bits, as int16
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
        stored = t.detach().contiguous()
        stored = stored.view(torch.int16) if stored.dtype == torch.bfloat16 else stored
        data = stored.numpy().astype(DTYPES[DTYPE_NAMES[t.dtype]][1]).tobytes()
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
    def tensor(begin, dtype, shape):
        t = torch.from_numpy(np.frombuffer(buffer, DTYPES[dtype][1], math.prod(shape), begin).copy())
        return (t.view(torch.bfloat16) if dtype == "BF16" else t.to(DTYPES[dtype][0])).view(shape)

    return {name: tensor(begin, dtype, shape) for begin, _, name, dtype, shape in entries}


# ---------------------------------------------------------------------------------------
# Fixture generation
# ---------------------------------------------------------------------------------------

def fresh_model(name, initial):
    model = build_torch_model(name)
    model.load_state_dict(initial, strict=True)
    return model


def sgd_steps(model, batches, steps, hyper, loss_scale=1.0):
    """`steps` optimizer steps in train mode; each zeroes the gradients once, then accumulates
    the batches. Returns the parameters, then the buffers (each in its named_* order)."""
    opt = torch.optim.SGD(model.parameters(), **hyper)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        for x, y in batches:
            (F.nll_loss(model(x), y) * loss_scale).backward()
        opt.step()
    return {**{n: p.detach().clone() for n, p in model.named_parameters()}, **buffers(model)}


def buffers(model):
    return {n: b.detach().clone() for n, b in model.named_buffers()}


def check_accumulation(name, accumulated, full_batch):
    for p, value in accumulated.items():
        diff = (value - full_batch[p]).abs().max().item()
        if diff > ACCUM_TOLERANCE:
            raise FixtureError(f"{name}: accumulating {ACCUM} micro-batches changed {p} by {diff:.3g} "
                               f"compared with one step on the whole batch (tolerance {ACCUM_TOLERANCE})")


def check_accumulation_differs(name, accumulated, full_batch, parameter_names):
    """Batch norm: each micro-batch normalises with its own statistics, so accumulating them
    is a different step from one on the whole batch; a fixture where the two agree could not
    tell a per-micro-batch batch norm from a whole-batch one."""
    diff = max((accumulated[p] - full_batch[p]).abs().max().item() for p in parameter_names)
    if not diff > ACCUM_BN_DIFFERENCE:
        raise FixtureError(f"{name}: accumulating {ACCUM} micro-batches with batch norm gives the same step as "
                           f"the whole batch (largest difference {diff:.3g}, expected more than {ACCUM_BN_DIFFERENCE})")


def fixture_tensors(name):
    model = build_torch_model(name)
    init_with_formula(model)
    batch_norm = has_batch_norm(model)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    initial_state = {n: v.detach().clone() for n, v in model.state_dict().items()}  # with the buffers

    gen = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(BATCH, *INPUT[name], generator=gen)
    y = torch.randint(0, 10, (BATCH,), generator=gen)

    model.train()
    logits = model(x)
    loss = F.nll_loss(logits, y)
    loss.backward()
    buffers1 = buffers(model)

    after3_model = fresh_model(name, initial_state)
    after3 = sgd_steps(after3_model, [(x, y)], 3, AFTER3)
    micro = BATCH // ACCUM
    micro_batches = [(x[i:i + micro], y[i:i + micro]) for i in range(0, BATCH, micro)]
    accum3 = sgd_steps(fresh_model(name, initial_state), micro_batches, 1, ACCUM3, loss_scale=1.0 / ACCUM)
    full_step = sgd_steps(fresh_model(name, initial_state), [(x, y)], 1, ACCUM3)
    if batch_norm:
        check_accumulation_differs(name, accum3, full_step, initial)
    else:
        check_accumulation(name, accum3, full_step)

    tensors = {"input": x, "target": y, "logits": logits.detach(), "loss": loss.detach()}
    if batch_norm:
        after3_model.eval()
        with torch.no_grad():
            tensors["eval_logits"] = after3_model(x)
    sections = [("params", initial), ("grad", {n: p.grad for n, p in model.named_parameters()})]
    if batch_norm:
        sections.append(("buffers1", buffers1))
    sections += [("after3", after3), ("accum3", accum3)]
    for prefix, values in sections:
        tensors.update({f"{prefix}.{p}": sampled(v) for p, v in values.items()})
    return tensors, metadata(name, initial, model if batch_norm else None)


def metadata(name, initial, batch_norm_model=None):
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
    if batch_norm_model is not None:
        bn = next(m for m in batch_norm_model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm))
        meta.update({"in_channels": text(INPUT[name][0]), "batch_norm.momentum": text(bn.momentum),
                     "batch_norm.eps": text(bn.eps), "init.batch_norm_spread": text(BN_SPREAD),
                     "init.batch_norm": "weight 1 + b*(2u-1), bias b*(2u-1), b = init.batch_norm_spread; "
                                        "buffers at PyTorch's defaults",
                     "buffers1.steps": "1"})
    return meta


def make_fixtures():
    os.makedirs(FIXTURE_DIR, exist_ok=True)
    for name in FIXTURES:
        tensors, meta = fixture_tensors(name)
        path = os.path.normpath(os.path.join(FIXTURE_DIR, f"{name}.safetensors"))
        save_safetensors(tensors, path, meta)
        print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


# ---------------------------------------------------------------------------------------
# --check-load: does a file written by dpcore load into the PyTorch model?
# ---------------------------------------------------------------------------------------

def check_load(path, name, shape):
    tensors = load_safetensors(path)
    x, expected = tensors.pop("input", None), tensors.pop("logits", None)
    model = build_torch_model(name, shape[0])
    want = model.state_dict()
    missing, unexpected = sorted(want.keys() - tensors.keys()), sorted(tensors.keys() - want.keys())
    if missing or unexpected:
        raise FixtureError(f"{path}: does not match {name}'s state_dict: missing {missing}, unexpected {unexpected}")
    for p, t in tensors.items():
        if t.dtype != want[p].dtype or t.shape != want[p].shape:
            raise FixtureError(f"{path}: tensor '{p}' is {DTYPE_NAMES.get(t.dtype, t.dtype)} {list(t.shape)}, "
                               f"{name} needs {DTYPE_NAMES[want[p].dtype]} {list(want[p].shape)}")
    model.load_state_dict(tensors, strict=True)
    model.eval()  # batch norm: the running statistics of the file (no effect on the other models)

    if expected is not None and x is None:
        raise FixtureError(f"{path}: has logits but no input to reproduce them from")
    if x is None:
        x = torch.randn(2, *shape, generator=torch.Generator().manual_seed(DATA_SEED))
    with torch.no_grad():
        out = model(x)
    if not torch.isfinite(out).all():
        raise FixtureError(f"{path}: the forward pass of {name} produced non-finite values")
    match = ""
    if expected is not None:
        if expected.shape != out.shape:
            raise FixtureError(f"{path}: logits have shape {list(expected.shape)}, the model gives {list(out.shape)}")
        diff = (out - expected).abs().max().item()
        if diff > CHECK_LOAD_TOLERANCE:
            raise FixtureError(f"{path}: PyTorch's forward pass differs from the file's logits by {diff:.3g} "
                               f"(tolerance {CHECK_LOAD_TOLERANCE})")
        match = (", matches logits" + (" (eval mode)" if has_batch_norm(model) else "")
                 + f": largest difference {diff:.3g} (tolerance {CHECK_LOAD_TOLERANCE})")
    print(f"{path}: loads into {name} (strict), forward output {list(out.shape)}{match}")


# ---------------------------------------------------------------------------------------
# --write-state: a state_dict trained by PyTorch, for dpcore to load
# ---------------------------------------------------------------------------------------

def write_state(path, name, seed, shape):
    torch.manual_seed(seed)
    model = build_torch_model(name, shape[0])
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, *shape, generator=gen)
    y = torch.randint(0, 10, (BATCH,), generator=gen)
    sgd_steps(model, [(x, y)], WRITE_STATE_STEPS, AFTER3)
    test_input = torch.randn(BATCH, *shape, generator=gen)
    model.eval()
    with torch.no_grad():
        logits = model(test_input)
    if not torch.isfinite(logits).all():
        raise FixtureError(f"{name}: {WRITE_STATE_STEPS} SGD steps gave non-finite eval-mode outputs")
    tensors = {n: v.detach().clone() for n, v in model.state_dict().items()}
    tensors.update({"input": test_input, "logits": logits})
    meta = {"model": name, "seed": str(seed), "input_shape": ",".join(map(str, shape)), "written_by": "pytorch",
            "steps": str(WRITE_STATE_STEPS), "logits": "eval-mode log_softmax output on input"}
    meta.update({f"sgd.{k}": str(v).lower() if isinstance(v, bool) else str(v) for k, v in AFTER3.items()})
    save_safetensors(tensors, path, meta)
    print(f"{path}: {name} after {WRITE_STATE_STEPS} SGD steps (seed {seed}, input {list(shape)}), "
          f"{len(tensors)} tensors")


def input_shape(name, text):
    """--input-shape C,H,W for model `name` (None: the model's own)."""
    if name not in INPUT:
        raise FixtureError(f"unknown model '{name}' (known: {', '.join(INPUT)})")
    if text is None:
        return tuple(INPUT[name])
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) <= 0:
        raise FixtureError(f"--input-shape {text!r}: expected three positive integers C,H,W")
    if name not in RESNET_BLOCKS and shape != tuple(INPUT[name]):
        raise FixtureError(f"{name} takes inputs {','.join(map(str, INPUT[name]))} only, not {text}")
    return shape


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check-load", nargs=2, metavar=("FILE", "MODEL"),
                      help=f"load FILE into MODEL ({', '.join(INPUT)}) and run a forward pass")
    mode.add_argument("--write-state", nargs=2, metavar=("FILE", "MODEL"),
                      help=f"write MODEL's state_dict after {WRITE_STATE_STEPS} SGD steps, with input and "
                           "eval-mode logits")
    parser.add_argument("--seed", type=int, help="--write-state: initialisation and data seed (default 0)")
    parser.add_argument("--input-shape", metavar="C,H,W", help="the input shape (ResNets: any); default the model's")
    args = parser.parse_args()
    if not args.write_state and args.seed is not None:
        parser.error("--seed goes with --write-state")
    if not (args.check_load or args.write_state) and args.input_shape is not None:
        parser.error("--input-shape goes with --check-load or --write-state")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        if args.check_load:
            path, name = args.check_load
            check_load(path, name, input_shape(name, args.input_shape))
        elif args.write_state:
            path, name = args.write_state
            write_state(path, name, args.seed or 0, input_shape(name, args.input_shape))
        else:
            make_fixtures()
    except (FixtureError, OSError, RuntimeError) as e:  # RuntimeError: torch refused an input
        sys.exit(f"make_fixtures.py: {e}")


if __name__ == "__main__":
    main()
