"""The reference models in PyTorch (shared/reference/models.md), for bench/compare_cpu.py,
bench/compare_gpu.py and scripts/make_fixtures.py: the same layers and state_dict names as
dpcore's zoo, log-softmax at the end (trained with NLL loss, mean over the batch).

simplenet, fashioncnn, vggs: PyTorch's default initialisation.

resnet8, resnet20: the CIFAR ResNets of He et al. 2016 (section 4.2) with torchvision's
BasicBlock and torchvision's state_dict names: conv1 (3x3, 16, no bias), bn1, relu; layer1,
layer2, layer3 of n BasicBlocks at widths 16, 32, 64 (n = 1 for resnet8, 3 for resnet20);
the first block of layer2 and layer3 has stride 2 in its conv1 and a projection shortcut
`downsample` = Sequential(Conv2d 1x1 stride 2 no bias, BatchNorm2d), the others the identity;
a block is relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)). Then global average pooling,
flatten, fc = Linear(64, 10). Any input size works; in_channels defaults to INPUT's (1, a
Fashion-MNIST image; 3 for CIFAR-10). torchvision's initialisation: kaiming_normal_(fan_out,
relu) for the convolutions, batch norm weight 1 and bias 0, PyTorch's default for fc; the
buffers (running_mean 0, running_var 1, num_batches_tracked 0) as PyTorch makes them.

resnet18, resnet34, resnet50: torchvision.models.resnet18/34/50(num_classes=CLASSES) (0.14,
ResNet v1.5) written out in torch.nn, module for module (in-place ReLUs included), so that
the current PyTorch of bench/.venv runs it too: PyPI has no torchvision for torch 2.15 yet.
Its names and shapes are torchvision's state_dict, which tests/layers/torchvision_resnet.py
checks dpcore's against with torchvision itself; the parameter counts are asserted. A
log_softmax after fc; inputs 3x224x224 by default, any size works.

bert-tiny, bert-mini: Hugging Face's BertForSequenceClassification (2 labels) as the torch.nn
twin of tests/layers/torch_bert.py builds it (transformers 4.30.2's modules, its eager
attention, dropout 0.1), the attention mask ids != 0 passed as dpcore's [N, T] ids form means,
then a log_softmax. Inputs: BERT_SEQ_LEN ids drawn from [1, vocab_size) (no padding).

torch is imported inside the functions, so that the scripts can print their plans (--dry-run)
and be compiled (python3 -m py_compile) where torch is absent.
"""

INPUT = {"simplenet": (3, 32, 32), "fashioncnn": (1, 28, 28), "vggs": (3, 32, 32),
         "resnet8": (1, 28, 28), "resnet20": (1, 28, 28),
         "resnet18": (3, 224, 224), "resnet34": (3, 224, 224), "resnet50": (3, 224, 224)}
CLASSES = 10
# BertConfig fields of dpcore's presets (layers/transformer/bert.h), the rest transformers' defaults.
BERT = {"bert-tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512),
        "bert-mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024)}
BERT_SEQ_LEN, BERT_VOCAB, BERT_LABELS = 128, 30522, 2
RESNET_BLOCKS = {"resnet8": 1, "resnet20": 3}  # BasicBlocks per stage: depth 6n + 2
# Parameter counts with one input channel (each further input channel adds 16*3*3 = 144).
RESNET_PARAMETERS_1CH = {"resnet8": 77754, "resnet20": 272186}
# torchvision's: bottleneck blocks or not, blocks per stage, and the parameter count with
# CLASSES outputs (torchvision's 1000-class counts less 990 rows of fc).
TORCHVISION_RESNETS = {"resnet18": (False, [2, 2, 2, 2], 11689512 - 990 * 513),
                       "resnet34": (False, [3, 4, 6, 3], 21797672 - 990 * 513),
                       "resnet50": (True, [3, 4, 6, 3], 25557032 - 990 * 2049)}


def build_torch_model(name, in_channels=None):
    """The model `name` (a key of INPUT). in_channels: the input's channels, for the ResNets
    (default INPUT[name][0]); the other models take only their own."""
    import torch.nn as nn
    import torch.nn.functional as F

    if name in BERT:
        return build_bert(name)
    if name not in INPUT:
        raise ValueError(f"unknown model '{name}' (known: {', '.join(list(INPUT) + list(BERT))})")
    if in_channels is None:
        in_channels = INPUT[name][0]
    if name in RESNET_BLOCKS:
        return build_resnet(name, in_channels)
    if name in TORCHVISION_RESNETS:
        return build_torchvision_resnet(name, in_channels)
    if in_channels != INPUT[name][0]:
        raise ValueError(f"{name} takes {INPUT[name][0]} input channels, not {in_channels}")

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


def init_resnet(model):
    """torchvision's ResNet initialisation: kaiming_normal_(fan_out, relu) for every convolution,
    batch norm weight 1 and bias 0; fc keeps PyTorch's default."""
    import torch.nn as nn

    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)


def build_resnet(name, in_channels):
    """resnet8 / resnet20 (see the module docstring), torchvision's names and initialisation."""
    import torch.nn as nn
    import torch.nn.functional as F

    class BasicBlock(nn.Module):  # torchvision.models.resnet.BasicBlock, expansion 1
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            out = out + (x if self.downsample is None else self.downsample(x))
            return F.relu(out)

    class CifarResNet(nn.Module):
        def __init__(self, blocks):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            cin = 16
            for stage, (width, stride) in enumerate([(16, 1), (32, 2), (64, 2)], start=1):
                layer = []
                for b in range(blocks):
                    layer.append(BasicBlock(cin, width, stride if b == 0 else 1))
                    cin = width
                setattr(self, f"layer{stage}", nn.Sequential(*layer))
            self.fc = nn.Linear(64, CLASSES)
            init_resnet(self)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = self.layer3(self.layer2(self.layer1(x)))
            x = F.adaptive_avg_pool2d(x, 1).flatten(1)
            return F.log_softmax(self.fc(x), dim=1)

    model = CifarResNet(RESNET_BLOCKS[name])
    count = sum(p.numel() for p in model.parameters())
    expected = RESNET_PARAMETERS_1CH[name] + (in_channels - 1) * 16 * 3 * 3
    assert count == expected, f"{name} with {in_channels} input channels has {count} parameters, expected {expected}"
    return model


def build_torchvision_resnet(name, in_channels):
    """torchvision's ResNet `name` (see the module docstring), ending in log_softmax."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def conv(cin, cout, k, stride=1):
        return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)

    class Block(nn.Module):  # torchvision's BasicBlock (expansion 1) or Bottleneck (4)
        def __init__(self, cin, width, stride, bottleneck):
            super().__init__()
            cout = width * (4 if bottleneck else 1)
            if bottleneck:
                self.conv1, self.bn1 = conv(cin, width, 1), nn.BatchNorm2d(width)
                self.conv2, self.bn2 = conv(width, width, 3, stride), nn.BatchNorm2d(width)
                self.conv3, self.bn3 = conv(width, cout, 1), nn.BatchNorm2d(cout)
            else:
                self.conv1, self.bn1 = conv(cin, width, 3, stride), nn.BatchNorm2d(width)
                self.conv2, self.bn2 = conv(width, width, 3), nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(conv(cin, cout, 1, stride), nn.BatchNorm2d(cout))
            self.bottleneck = bottleneck

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            if self.bottleneck:
                out = self.bn3(self.conv3(self.relu(out)))
            out += x if self.downsample is None else self.downsample(x)
            return self.relu(out)

    class ResNet(nn.Module):
        def __init__(self, bottleneck, blocks):
            super().__init__()
            self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            cin = 64
            for stage, n in enumerate(blocks):
                width = 64 << stage
                layer = []
                for b in range(n):
                    layer.append(Block(cin, width, 2 if b == 0 and stage > 0 else 1, bottleneck))
                    cin = width * (4 if bottleneck else 1)
                setattr(self, f"layer{stage + 1}", nn.Sequential(*layer))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(cin, CLASSES)
            init_resnet(self)  # zero_init_residual False

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return F.log_softmax(self.fc(torch.flatten(self.avgpool(x), 1)), dim=1)

    bottleneck, blocks, parameters = TORCHVISION_RESNETS[name]
    model = ResNet(bottleneck, blocks)
    count = sum(p.numel() for p in model.parameters())
    expected = parameters + (in_channels - 3) * 64 * 7 * 7
    assert count == expected, f"{name} with {in_channels} input channels has {count} parameters, expected {expected}"
    return model


def build_bert(name):
    """BERT (BERT[name]) from the twin of tests/layers/torch_bert.py, ending in log_softmax."""
    import os
    import sys

    import torch.nn as nn
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "layers"))
    import torch_bert

    config = torch_bert.Config(**BERT[name])

    class LogProbabilities(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch_bert.build(config, "classification")

        def forward(self, ids):
            return F.log_softmax(self.model(**torch_bert.model_inputs(ids, config)), dim=-1)

    return LogProbabilities()


def random_batch(name, batch, device, seed=0, image_size=0):
    """Pixels uniform in [-1, 1), labels uniform over the classes, made once on `device`;
    image_size > 0: square images of that size (the ResNets) instead of INPUT[name]'s.
    BERT: BERT_SEQ_LEN ids uniform in [1, BERT_VOCAB), labels over BERT_LABELS."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if name in BERT:
        x = torch.randint(1, BERT_VOCAB, (batch, BERT_SEQ_LEN), generator=g)
        y = torch.randint(0, BERT_LABELS, (batch,), generator=g)
        return x.to(device), y.to(device)
    shape = INPUT[name] if image_size <= 0 else (INPUT[name][0], image_size, image_size)
    x = torch.rand(batch, *shape, generator=g) * 2 - 1
    y = torch.randint(0, CLASSES, (batch,), generator=g)
    return x.to(device), y.to(device)


def make_step(model, optimizer, x, y, accum, precision="fp32"):
    """One training step as PyTorch users write it: zero grads, `accum` equal micro-batches
    of forward + NLL loss (mean over the whole batch) + backward, one SGD step. With
    precision "bf16" the forward and the loss run under torch.autocast in bfloat16 (on x's
    device), the backward outside it, as the autocast recipe has it."""
    import torch
    import torch.nn.functional as F

    if x.shape[0] % accum:
        raise ValueError(f"batch {x.shape[0]} is not a multiple of accum {accum}")
    xs, ys = x.chunk(accum), y.chunk(accum)
    device_type = x.device.type

    def step():
        optimizer.zero_grad(set_to_none=True)
        for xc, yc in zip(xs, ys):
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = F.nll_loss(model(xc), yc) / accum  # equal chunks: mean over the batch
            loss.backward()
        optimizer.step()

    return step


def sgd(model):
    import torch

    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def adamw(model):
    """torch.optim.AdamW's defaults (lr 0.001, weight decay 0.01), as dpcore_step_bench --optimizer adamw."""
    import torch

    return torch.optim.AdamW(model.parameters())


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

