"""The reference models in PyTorch (shared/reference/models.md), for bench/compare_cpu.py and
bench/compare_gpu.py: the same layers and state_dict names as dpcore's zoo, PyTorch's default
initialisation, log-softmax at the end (trained with NLL loss, mean over the batch).

torch is imported inside the functions, so that the scripts can print their plans (--dry-run)
and be compiled (python3 -m py_compile) where torch is absent.
"""

INPUT = {"simplenet": (3, 32, 32), "fashioncnn": (1, 28, 28), "vggs": (3, 32, 32)}
CLASSES = 10


def build_torch_model(name):
    import torch.nn as nn
    import torch.nn.functional as F

    def conv(cin, cout):  # every reference conv: 3x3, stride 1, padding 1, with bias
        return nn.Conv2d(cin, cout, 3, stride=1, padding=1)

    def pool(x):  # every reference pool: 2x2 max, stride 2
        return F.max_pool2d(x, 2, 2)

    class SimpleNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = conv(3, 16)
            self.fc = nn.Linear(16 * 16 * 16, 10)

        def forward(self, x):
            x = pool(F.relu(self.conv(x)))
            return F.log_softmax(self.fc(x.flatten(1)), dim=1)

    class FashionCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = conv(1, 32), conv(32, 64)
            self.f1, self.f2 = nn.Linear(64 * 7 * 7, 128), nn.Linear(128, 10)

        def forward(self, x):
            x = pool(F.relu(self.c1(x)))
            x = pool(F.relu(self.c2(x)))
            x = F.relu(self.f1(x.flatten(1)))
            return F.log_softmax(self.f2(x), dim=1)

    class VggS(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2, self.c3 = conv(3, 64), conv(64, 128), conv(128, 256)
            self.fc = nn.Linear(256 * 4 * 4, 10)

        def forward(self, x):
            for c in (self.c1, self.c2, self.c3):
                x = pool(F.relu(c(x)))
            return F.log_softmax(self.fc(x.flatten(1)), dim=1)

    return {"simplenet": SimpleNet, "fashioncnn": FashionCNN, "vggs": VggS}[name]()


def random_batch(name, batch, device, seed=0):
    """Pixels uniform in [-1, 1), labels uniform over the classes, made once on `device`."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, *INPUT[name], generator=g) * 2 - 1
    y = torch.randint(0, CLASSES, (batch,), generator=g)
    return x.to(device), y.to(device)


def make_step(model, optimizer, x, y, accum):
    """One training step as PyTorch users write it: zero grads, `accum` equal micro-batches
    of forward + NLL loss (mean over the whole batch) + backward, one SGD step."""
    import torch.nn.functional as F

    if x.shape[0] % accum:
        raise ValueError(f"batch {x.shape[0]} is not a multiple of accum {accum}")
    xs, ys = x.chunk(accum), y.chunk(accum)

    def step():
        optimizer.zero_grad(set_to_none=True)
        for xc, yc in zip(xs, ys):
            (F.nll_loss(model(xc), yc) / accum).backward()  # equal chunks: mean over the batch
        optimizer.step()

    return step


def sgd(model):
    import torch

    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def percentile(sorted_values, p):
    """Nearest rank, as dpcore_step_bench computes it."""
    rank = -(-len(sorted_values) * p // 100)  # ceil
    return sorted_values[min(max(int(rank), 1), len(sorted_values)) - 1]


def summarize(times_us, batch):
    """median, p10, p90 (microseconds) and samples/s at the median, like dpcore_step_bench."""
    import statistics

    times = sorted(times_us)
    med = statistics.median(times)
    return {"median_us": med, "p10_us": percentile(times, 10), "p90_us": percentile(times, 90),
            "samples_per_s": batch / (med * 1e-6)}


def write_json(path, doc):
    """Writes doc as JSON to a temporary name, then renames it over path."""
    import json
    import os

    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)

