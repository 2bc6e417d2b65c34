"""Issue 24's kernels on the PyTorch side, on the shapes dpcore's kernel benchmarks ran, for
bench/compare_cpu_ops.py (CPU, every PyTorch) and bench/compare_gpu.py (CUDA).

cpu_kernels_bench (bench/cpu_transformer_bench.cpp) and cuda_kernels_bench
(bench/cuda_transformer_bench.cu) put each shape into the benchmark's name as key:value
parts; parse() turns a name into a Case, so the shapes are never written twice:

    BM_AttentionForward/B:32/H:2/T:128/d:64/threads:1/fused:1/real_time   (CPU)
    attention_fwd/fused/B:32/H:2/T:128/d:64                               (CUDA)

make_op() builds PyTorch's counterpart of a case as a function of no arguments that runs
it once; the backward ones run torch.autograd.grad on a graph made once (retain_graph), so
they include the autograd engine's dispatch, small beside these kernels. torch is imported
inside the functions, so that the scripts' --dry-run works without it.
"""
from dataclasses import dataclass, field

# The op of a benchmark name's first part (CPU) or first part and, for gelu and attention,
# second part (CUDA).
CPU_OPS = {"BM_AttentionForward": "attention_fwd", "BM_AttentionBackward": "attention_bwd",
           "BM_LayerNormForward": "layer_norm_fwd", "BM_LayerNormBackward": "layer_norm_bwd",
           "BM_GeluForward": "gelu_fwd", "BM_GeluBackward": "gelu_bwd",
           "BM_SoftmaxForward": "softmax_fwd", "BM_SoftmaxBackward": "softmax_bwd", "BM_AdamW": "adamw"}
CUDA_OPS = {"attention_fwd", "attention_bwd", "layer_norm_fwd", "layer_norm_bwd", "gelu_fwd", "gelu_bwd",
            "softmax_fwd", "softmax_bwd", "adamw"}
GELU_FORMS = {0: "none", 1: "tanh"}  # cpu_kernels_bench's form argument
LAYER_NORM_EPS = 1e-12  # BERT's, as both benchmarks use
ADAMW = {"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}  # as both benchmarks


@dataclass(frozen=True)
class Case:
    """op: a key of CUDA_OPS; shape: the name's key:value parts (ints) but threads and fused;
    variant: what distinguishes dpcore rows of one case ("fused", "explicit", "explicit_hand",
    "explicit_cublas"; the gelu form is in shape as form); threads: CPU thread count (0 on CUDA)."""
    op: str
    shape: tuple = field(default=())
    variant: str = ""
    threads: int = 0

    def get(self, key):
        return dict(self.shape)[key]

    def torch_key(self):
        """What PyTorch's side depends on: the same for the fused and explicit rows."""
        return (self.op, self.shape, self.threads)

    def shape_text(self):
        return " ".join(f"{k}={GELU_FORMS[v] if k == 'form' else v}" for k, v in self.shape)


# The parts Google Benchmark appends to a name (Iterations(), UseRealTime(), UseManualTime()).
BENCHMARK_SUFFIXES = ("iterations:", "repeats:", "min_time:", "real_time", "manual_time")


def parse(name):
    """The Case of a cpu_kernels_bench or cuda_kernels_bench name, or None for other benchmarks."""
    parts = [p for p in name.split("/") if not p.startswith(BENCHMARK_SUFFIXES)]
    if parts[0] in CPU_OPS:
        values = dict((k, int(v)) for k, v in (p.split(":", 1) for p in parts[1:] if ":" in p))
        threads = values.pop("threads")
        variant = ""
        if "fused" in values:
            variant = "fused" if values.pop("fused") else "explicit"
        return Case(CPU_OPS[parts[0]], tuple(values.items()), variant, threads)
    if parts[0] in CUDA_OPS:
        shape = [(k, int(v)) for k, v in (p.split(":", 1) for p in parts[1:] if ":" in p)]
        labels = [p for p in parts[1:] if ":" not in p]
        variant = ""
        if parts[0].startswith("gelu"):
            shape.insert(0, ("form", {v: k for k, v in GELU_FORMS.items()}[labels[0]]))
        elif labels:
            variant = labels[0]
        return Case(parts[0], tuple(shape), variant, 0)
    return None


def make_op(torch, case, device):
    """PyTorch's counterpart of `case` on `device`, float32: (a function that runs it once,
    which PyTorch function it calls)."""
    import torch.nn.functional as F

    g = torch.Generator(device=device).manual_seed(0)  # drawn where they are used: 512 MiB inputs at T = 2048
    rand = lambda *shape: torch.rand(*shape, generator=g, device=device) * 2 - 1  # noqa: E731
    op = case.op
    backward = op.endswith("_bwd")

    def grad_of(out, inputs):
        dout = rand(*out.shape)
        return lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True)

    if op.startswith("attention"):
        B, H, T, d = (case.get(k) for k in "BHTd")
        q, k, v = (rand(B, H, T, d).requires_grad_(backward) for _ in range(3))
        if hasattr(F, "scaled_dot_product_attention"):
            forward, what = lambda: F.scaled_dot_product_attention(q, k, v), "F.scaled_dot_product_attention"
        else:  # PyTorch 1.13: the explicit formula, as its nn.MultiheadAttention computes it
            scale = d ** -0.5
            forward = lambda: torch.softmax((q * scale) @ k.transpose(-2, -1), -1) @ v  # noqa: E731
            what = "softmax(q k^T * scale) v (no scaled_dot_product_attention in this PyTorch)"
        run = grad_of(forward(), (q, k, v)) if backward else forward
    elif op.startswith("layer_norm"):
        rows, cols = case.get("rows"), case.get("cols")
        x, w, b = rand(rows, cols).requires_grad_(backward), rand(cols).requires_grad_(backward), rand(cols)
        b.requires_grad_(backward)
        forward = lambda: F.layer_norm(x, (cols,), w, b, LAYER_NORM_EPS)  # noqa: E731
        run, what = (grad_of(forward(), (x, w, b)) if backward else forward), "F.layer_norm"
    elif op.startswith("gelu"):
        form = GELU_FORMS[case.get("form")]
        x = rand(case.get("n")).requires_grad_(backward)
        forward = lambda: F.gelu(x, approximate=form)  # noqa: E731
        run, what = (grad_of(forward(), (x,)) if backward else forward), "F.gelu(approximate=form)"
    elif op.startswith("softmax"):
        x = rand(case.get("rows"), case.get("cols")).requires_grad_(backward)
        forward = lambda: torch.softmax(x, -1)  # noqa: E731
        run, what = (grad_of(forward(), (x,)) if backward else forward), "torch.softmax"
    elif op == "adamw":
        n = case.get("n")
        p = torch.nn.Parameter(rand(n))
        p.grad = rand(n)
        optimizer, what = adamw(torch, p)
        optimizer.step()  # from step 2 on, as dpcore's: the moments exist
        run = optimizer.step
    else:
        raise ValueError(f"no PyTorch counterpart for op '{op}'")
    return run, what


def adamw(torch, p):
    """torch.optim.AdamW over p with the benchmarks' settings, its fused implementation where
    this PyTorch has one for p's device (the fastest it offers), else its default."""
    try:
        return torch.optim.AdamW([p], **ADAMW, fused=True), "torch.optim.AdamW(fused=True)"
    except (TypeError, RuntimeError, ValueError):
        return torch.optim.AdamW([p], **ADAMW), "torch.optim.AdamW (default implementation)"
