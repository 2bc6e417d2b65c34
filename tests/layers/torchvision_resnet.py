"""torchvision's ResNets (Debian's python3-torchvision 0.14) for tests/layers/torchvision_resnet_test.cpp:
one process for every case, since importing torch and torchvision takes most of the time.

    torchvision_resnet.py CASE...

    parity:MODEL:IN:OUT   IN (written by dpcore) holds MODEL's state_dict (float32 or float64,
        num_batches_tracked int64), `input` [N, 3, H, W] and `target` [N] (int64). The
        state loads with load_state_dict(strict=True) into torchvision.models.MODEL with
        fc's rows as num_classes; then, computed in float64 from those values (the
        reference), in train mode: `logits` (fc's output), `loss` (cross-entropy, mean over
        the batch), `grad.<p>` for every parameter, the buffers after that forward pass
        (`<b>`, the state_dict names), and `eval_logits`, the eval-mode output on `input`
        with those buffers. For a float32 IN the same again in float32, as `float32.<name>`:
        how far PyTorch's own float32 is from the reference. All written to OUT (float64).

    export:MODEL:IN:OUT   IN (written by dpcore) holds MODEL's state_dict after training
        (1000 classes, float32), `input` and `logits` (dpcore's eval-mode log-probabilities
        on it). Loads the state strictly into torchvision.models.MODEL() and checks that the
        eval-mode log_softmax output matches `logits` to EXPORT_TOLERANCE. Then the other
        way: torchvision.models.MODEL() as torchvision initialises it (torch.manual_seed(0)),
        one train-mode forward pass on a batch (so the running statistics move and
        num_batches_tracked is 1), its state_dict as it is, plus `input` and `logits` (the
        eval-mode log_softmax output on it), written to OUT for dpcore to load.

Exits non-zero, naming the file and the problem, when a check fails.
"""
import os
import sys

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from make_fixtures import FixtureError, load_safetensors, save_safetensors  # noqa: E402

# dpcore and PyTorch sum in different orders in float32: the eval-mode log-probabilities of a
# trained ResNet agree to a few float32 roundings of their largest element (about 1e-6 of
# the scale of values up to ~10), 1e-4 leaves room and still catches any wrong weight or
# running statistic (those move the output by whole units).
EXPORT_TOLERANCE = 1e-4


def torchvision_model(name, state):
    classes = state["fc.weight"].shape[0] if "fc.weight" in state else 1000
    model = getattr(torchvision.models, name)(num_classes=classes)
    want = model.state_dict()
    missing, unexpected = sorted(want.keys() - state.keys()), sorted(state.keys() - want.keys())
    if missing or unexpected:
        raise FixtureError(f"{name}: the file does not match torchvision's state_dict: missing {missing[:5]} "
                           f"({len(missing)}), unexpected {unexpected[:5]} ({len(unexpected)})")
    for k, t in state.items():
        if t.shape != want[k].shape:
            raise FixtureError(f"{name}: '{k}' has shape {list(t.shape)}, torchvision's is {list(want[k].shape)}")
        if t.dtype.is_floating_point != want[k].dtype.is_floating_point:
            raise FixtureError(f"{name}: '{k}' is {t.dtype}, torchvision's is {want[k].dtype}")
    model = model.to(next(t for t in state.values() if t.is_floating_point()).dtype)
    model.load_state_dict(state, strict=True)
    return model


def train_step_results(name, state, x, y, dtype):
    model = torchvision_model(name, state).to(dtype)
    model.train()
    logits = model(x.to(dtype))
    loss = F.cross_entropy(logits, y)
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach()}
    out.update({f"grad.{n}": p.grad for n, p in model.named_parameters()})
    out.update({n: b.clone() for n, b in model.named_buffers()})
    model.eval()
    with torch.no_grad():
        out["eval_logits"] = model(x.to(dtype))
    return out


def parity(name, path_in, path_out):
    tensors = load_safetensors(path_in)
    x, y = tensors.pop("input"), tensors.pop("target")
    out = {k: v.to(torch.float64) if v.is_floating_point() else v
           for k, v in train_step_results(name, tensors, x, y, torch.float64).items()}
    if x.dtype == torch.float32:
        out.update({f"float32.{k}": v.to(torch.float64) if v.is_floating_point() else v
                    for k, v in train_step_results(name, tensors, x, y, torch.float32).items()})
    save_safetensors(out, path_out, {"model": name, "torchvision": torchvision.__version__})
    print(f"{path_out}: {name} train-mode step and eval logits for {list(x.shape)} ({x.dtype})")


def export(name, path_in, path_out):
    tensors = load_safetensors(path_in)
    x, expected = tensors.pop("input"), tensors.pop("logits")
    model = torchvision_model(name, tensors).eval()
    with torch.no_grad():
        got = F.log_softmax(model(x), dim=1)
    diff = (got - expected).abs().max().item()
    if not diff <= EXPORT_TOLERANCE:
        raise FixtureError(f"{path_in}: torchvision's {name} with dpcore's state gives eval-mode log-probabilities "
                           f"{diff:.3g} from dpcore's (tolerance {EXPORT_TOLERANCE})")
    print(f"{path_in}: loads into torchvision.models.{name} (strict), eval-mode log-probabilities within {diff:.3g}")

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)()
    gen = torch.Generator().manual_seed(1)
    model.train()
    with torch.no_grad():
        model(torch.randn(2, 3, 32, 32, generator=gen))
    model.eval()
    test_input = torch.randn(2, 3, 32, 32, generator=gen)
    with torch.no_grad():
        logits = F.log_softmax(model(test_input), dim=1)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state.update({"input": test_input, "logits": logits})
    save_safetensors(state, path_out, {"model": name, "written_by": "torchvision " + torchvision.__version__})
    print(f"{path_out}: torchvision.models.{name}() state_dict, {len(state) - 2} tensors")


def main():
    torch.set_num_threads(2)  # CI shares its two cores between tests
    try:
        for case in sys.argv[1:]:
            kind, name, path_in, path_out = case.split(":")
            {"parity": parity, "export": export}[kind](name, path_in, path_out)
    except (FixtureError, OSError, RuntimeError, KeyError, ValueError) as e:
        sys.exit(f"torchvision_resnet.py: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
