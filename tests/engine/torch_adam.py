"""torch.optim.Adam / AdamW on random gradients, for tests/engine/adam_test.cpp.

    torch_adam.py OUT.json STEPS HALVE_LR_AT NAME:LR:BETA1:BETA2:EPS:WEIGHT_DECAY:DECOUPLED...

For each case: two float32 parameters, "w" [5, 7] and "b" [7], drawn from a seed, and
STEPS random gradients (their scale changing from step to step), stepped by
torch.optim.Adam (DECOUPLED 0) or torch.optim.AdamW (1) with the learning rate halved from
step HALVE_LR_AT on; "b" is in a parameter group of its own with weight_decay 0 (BERT's
convention for biases). Writes, per case and tensor, the initial values, every step's
gradient and the final values, exp_avg and exp_avg_sq (float32 values, exact in JSON).
"""
import json
import os
import sys

import torch


def run_case(seed, lr, beta1, beta2, eps, weight_decay, decoupled, steps, halve_lr_at):
    gen = torch.Generator().manual_seed(seed)
    shapes = {"w": (5, 7), "b": (7,)}
    params = {name: torch.randn(shape, generator=gen, dtype=torch.float32) for name, shape in shapes.items()}
    record = {name: {"init": p.flatten().tolist(), "grads": []} for name, p in params.items()}
    for p in params.values():
        p.requires_grad_(True)
    optimizer_type = torch.optim.AdamW if decoupled else torch.optim.Adam
    # foreach=False: the single-tensor path whose order of operations dpcore's kernels follow.
    groups = [{"params": [params["w"]]}, {"params": [params["b"]], "weight_decay": 0.0}]
    optimizer = optimizer_type(groups, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay,
                               foreach=False)
    for step in range(1, steps + 1):
        if step == halve_lr_at:
            for group in optimizer.param_groups:
                group["lr"] = lr / 2
        scale = 10.0 ** torch.empty(1).uniform_(-3, 1, generator=gen).item()
        for name, p in params.items():
            p.grad = torch.randn(p.shape, generator=gen, dtype=torch.float32) * scale
            record[name]["grads"].append(p.grad.flatten().tolist())
        optimizer.step()
    for name, p in params.items():
        state = optimizer.state[p]
        record[name]["final"] = p.detach().flatten().tolist()
        record[name]["exp_avg"] = state["exp_avg"].flatten().tolist()
        record[name]["exp_avg_sq"] = state["exp_avg_sq"].flatten().tolist()
    return record


def main():
    out, steps, halve_lr_at, cases = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    result = {}
    for seed, case in enumerate(cases):
        name, *numbers = case.split(":")
        lr, beta1, beta2, eps, weight_decay, decoupled = map(float, numbers)
        result[name] = run_case(seed, lr, beta1, beta2, eps, weight_decay, decoupled != 0, steps, halve_lr_at)
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
