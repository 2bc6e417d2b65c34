"""torch.amp.GradScaler("cpu") on scripted overflows, for tests/engine/grad_scaler_test.cpp.

    torch_grad_scaler.py OUT.json

Needs a PyTorch whose _amp_update_scale_ runs on CPU tensors (2.x: bench/.venv's); Debian's
1.13 has it only for CUDA. tests/fixtures/grad_scaler_torch.json is this script's output
with PyTorch 2.15.0. Each scenario trains one parameter w = zeros(4) with SGD(lr=0.5) on
loss = (w * x).sum(), so the gradient is x; at the scenario's bad steps one element of x is
an Inf or a NaN. Per step it records x (float32 bit patterns), the scale before the step, the gradient after
scaler.step() has unscaled it (float32 bit patterns, NaN and Inf included), whether the
optimizer stepped, and the scale and growth tracker after scaler.update().
"""
import json
import os
import struct
import sys

import torch

X = [1.0, -2.0, 0.1, 3.0e-5]
SCENARIOS = [
    # PyTorch's defaults except a short growth interval: backoff, growth and the reset of
    # the tracker at every overflow.
    {"name": "defaults_interval_3", "init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
     "growth_interval": 3, "steps": 30, "bad": {0: "inf", 1: "nan", 5: "inf", 9: "-inf", 10: "nan", 11: "inf",
                                               17: "nan", 24: "inf", 25: "inf"}},
    # Factors that are not powers of two: every product rounds to float32, and unscaling by
    # the float32 reciprocal does not give x back exactly.
    {"name": "odd_factors", "init_scale": 1000.0, "growth_factor": 1.7, "backoff_factor": 0.3,
     "growth_interval": 2, "steps": 20, "bad": {3: "inf", 4: "nan", 11: "inf", 12: "inf", 13: "nan"}},
    # Growth stops short of float32's infinity (2^127 * 2 is not taken), with gradients
    # small enough to stay finite at 2^127; then x = -2 at that scale overflows by itself.
    {"name": "growth_capped", "init_scale": 2.0 ** 125, "growth_factor": 2.0, "backoff_factor": 0.5,
     "growth_interval": 1, "steps": 8, "bad": {5: "nan"}, "x": [1.0, -0.5, 0.1, 3.0e-5], "x_from_6": X},
]


def bits(t):
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in t.tolist()]


def run(s):
    scaler = torch.amp.GradScaler("cpu", init_scale=s["init_scale"], growth_factor=s["growth_factor"],
                                  backoff_factor=s["backoff_factor"], growth_interval=s["growth_interval"])
    w = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.5)
    steps = []
    for step in range(s["steps"]):
        x = torch.tensor(s["x_from_6"] if "x_from_6" in s and step >= 6 else s.get("x", X))
        if step in s["bad"]:
            x[2] = float(s["bad"][step])
        opt.zero_grad()
        before = w.detach().clone()
        scale = scaler.get_scale()
        scaler.scale((w * x).sum()).backward()
        scaler.step(opt)
        stepped = not torch.equal(before, w.detach())
        grad = bits(w.grad)
        scaler.update()
        state = scaler.state_dict()
        steps.append({"x_bits": bits(x), "scale": scale, "grad_bits": grad, "stepped": stepped,
                      "scale_after": state["scale"], "growth_tracker": state["_growth_tracker"]})
    return {k: s[k] for k in ("name", "init_scale", "growth_factor", "backoff_factor", "growth_interval")} | \
        {"steps": steps}


def main():
    out = sys.argv[1]
    result = {"torch": torch.__version__, "scenarios": [run(s) for s in SCENARIOS]}
    with open(out + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
