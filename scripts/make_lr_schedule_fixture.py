#!/usr/bin/python3
"""The learning rates (and momenta) PyTorch's schedulers give, for dpcore's --lr-schedule test.

Usage (Debian's python3-torch is visible only to /usr/bin/python3):

    /usr/bin/python3 scripts/make_lr_schedule_fixture.py

writes tests/fixtures/lr_schedules.json, read by tests/train/lr_schedule_test.cpp.
Deterministic: running it again produces a byte-identical file.

Each case runs torch.optim.SGD on one parameter for `total` steps, with the scheduler that
train/schedule/lr_schedule.h names as the PyTorch equivalent of the dpcore schedule, stepped once
after every optimizer step, and records param_groups[0]["lr"] and ["momentum"] as each
step uses them (before optimizer.step()). Floats are written with repr: they read back
exactly.
"""
import json
import os
import warnings

import torch
from torch.optim import lr_scheduler as S

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "lr_schedules.json")

# (dpcore --lr-schedule, --lr, --momentum, --warmup-steps, total steps T, steps per epoch E)
CASES = [
    ("constant", 0.1, 0.9, 0, 12, 5),
    ("constant", 0.1, 0.9, 5, 20, 5),
    ("step:2:0.5", 0.1, 0.9, 0, 60, 7),
    ("step:1:0.1", 0.4, 0.0, 4, 40, 9),
    ("cosine", 0.1, 0.9, 0, 50, 10),
    ("cosine", 0.05, 0.9, 10, 97, 10),
    ("onecycle", 0.1, 0.9, 0, 100, 10),
    ("onecycle", 0.1, 0.9, 0, 7, 7),
    ("onecycle", 0.2, 0.9, 7, 37, 5),
    ("onecycle", 0.1, 0.0, 0, 30, 5),  # momentum 0: not cycled (cycle_momentum=False)
    ("linear", 0.1, 0.9, 5, 30, 10),
    ("linear", 5e-5, 0.9, 0, 20, 10),
    ("linear", 2e-5, 0.0, 10, 97, 10),
]


def linear_with_warmup(warmup, total):
    """transformers.get_linear_schedule_with_warmup's lr_lambda (transformers/optimization.py)."""
    def lr_lambda(current_step):
        if current_step < warmup:
            return float(current_step) / float(max(1, warmup))
        return max(0.0, float(total - current_step) / float(max(1, total - warmup)))
    return lr_lambda


def main_scheduler(opt, spec, total, warmup, per_epoch):
    if spec == "constant":
        return S.LambdaLR(opt, lambda t: 1.0)
    if spec.startswith("step:"):
        _, epochs, gamma = spec.split(":")
        # StepLR(step_size=EPOCHS) stepped per epoch is StepLR(step_size=EPOCHS*E) per step.
        return S.StepLR(opt, step_size=int(epochs) * per_epoch, gamma=float(gamma))
    if spec == "cosine":
        return S.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=0)
    raise ValueError(spec)


def run(spec, lr, momentum, warmup, total, per_epoch):
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=lr, momentum=momentum)
    if spec == "linear":
        sched = S.LambdaLR(opt, linear_with_warmup(warmup, total))
    elif spec == "onecycle":
        pct_start = warmup / total if warmup > 0 else 0.3
        sched = S.OneCycleLR(opt, max_lr=lr, total_steps=total, pct_start=pct_start, anneal_strategy="cos",
                             div_factor=25.0, final_div_factor=1e4, three_phase=False,
                             cycle_momentum=momentum > 0, base_momentum=0.85, max_momentum=0.95)
    elif warmup > 0:
        rise = S.LambdaLR(opt, lambda t: min(1.0, (t + 1) / warmup))
        sched = S.SequentialLR(opt, [rise, main_scheduler(opt, spec, total, warmup, per_epoch)], milestones=[warmup])
    else:
        sched = main_scheduler(opt, spec, total, warmup, per_epoch)
    lrs, momenta = [], []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        momenta.append(opt.param_groups[0]["momentum"])
        param.grad = torch.ones(1)
        opt.step()
        sched.step()
    return {"schedule": spec, "lr": lr, "momentum": momentum, "warmup_steps": warmup, "total_steps": total,
            "steps_per_epoch": per_epoch, "lrs": lrs, "momenta": momenta}


def main():
    warnings.simplefilter("ignore")  # SequentialLR's step(0) deprecation notice
    cases = [run(*case) for case in CASES]
    text = json.dumps({"torch": torch.__version__, "cases": cases}, indent=1)
    with open(OUT, "w") as f:
        f.write(text + "\n")
    print(f"wrote {OUT}: {len(cases)} cases, torch {torch.__version__}")


if __name__ == "__main__":
    main()
