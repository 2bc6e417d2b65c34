"""What the scripts that measure dpcore share: running the command (and stopping, with its
output, when it fails), and reading a trace written by `dpcore train --trace`
(engine/trace.h): its lane names and spans, and the median training step."""
import json
import os
import statistics
import subprocess
import sys

# Threads that wait sleep instead of spinning: the stages and replicas share the cores.
ENV = dict(os.environ, OMP_WAIT_POLICY="passive")


def run(args, who):
    """`args` run to the end; its output (stdout and stderr), or exit naming the command."""
    r = subprocess.run(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"{who}: {' '.join(args)} failed:\n{r.stdout}")
    return r.stdout


def load(path, who):
    """(lane name by thread id, the "X" span events) of the trace at `path`; `who` names
    the calling script in the error when it is not a trace."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"{who}: {path}: not a readable trace ({e})")
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    return names, [e for e in events if e.get("ph") == "X"]


def steps(names, spans):
    """The training steps: the "step N" spans of the main lane."""
    return [s for s in spans if names.get(s["tid"]) == "main" and s["name"].startswith("step ")]


def median_step_ms(path, who):
    """The median duration of the traced training steps, in milliseconds."""
    names, spans = load(path, who)
    durations = [s["dur"] for s in steps(names, spans)]
    if not durations:
        sys.exit(f"{who}: {path}: no 'step N' span on the main lane")
    return statistics.median(durations) / 1e3
