"""What the CPU comparisons record about the machine and the PyTorch builds they ran.

The same PyTorch build moves with the CPU far more than dpcore does (Debian's 1.13 takes
189 ms for a resnet8 step on an Intel Xeon and 315-445 ms on an AMD EPYC of the same
machine kind with OPENBLAS_CORETYPE=Haswell), so every record names the CPU model and the
OpenBLAS variables, and the comparisons run each PyTorch they are given (docs/benchmarks.md).
"""
import os
import subprocess
import sys

DEBIAN_PYTHON = "/usr/bin/python3"  # Debian's PyTorch 1.13 (python3-torch)
VENV_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".venv", "bin", "python")  # bench/install-torch.sh
OPENBLAS_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def cpu_model():
    """The first 'model name' of /proc/cpuinfo, or '?' where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def openblas_environment():
    """{variable: value or None} for the OpenBLAS variables both engines run under."""
    return {name: os.environ.get(name) for name in OPENBLAS_VARIABLES}


def default_torch_pythons():
    """Debian's interpreter (PyTorch 1.13), then bench/.venv's (a current PyTorch) if installed."""
    return [DEBIAN_PYTHON] + ([VENV_PYTHON] if os.access(VENV_PYTHON, os.X_OK) else [])


def torch_version(python):
    """The version of torch that `python` imports; exits naming the interpreter if it cannot."""
    done = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        sys.exit(f"--torch-python {python}: cannot import torch ({tail}); bench/install-torch.sh makes bench/.venv")
    return done.stdout.strip()


def record(pythons):
    """The machine and the PyTorch builds, for a results file: cpu, cores, OpenBLAS variables,
    and [{python, version}] in the order given."""
    return {"cpu": cpu_model(), "cpus": os.cpu_count(), "openblas_env": openblas_environment(),
            "pytorch": [{"python": p, "version": torch_version(p)} for p in pythons]}


def describe(rec):
    """One line for a log: 'CPU, N CPUs, OPENBLAS_CORETYPE=..., OPENBLAS_L2_SIZE=...; PyTorch a (python), b (python)'."""
    blas = ", ".join(f"{k}={v if v is not None else 'unset'}" for k, v in rec["openblas_env"].items())
    torches = ", ".join(f"{t['version']} ({t['python']})" for t in rec["pytorch"])
    return f"{rec['cpu']}, {rec['cpus']} CPUs, {blas}; PyTorch {torches}"
