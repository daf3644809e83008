"""`forgetmap calibrate`: measure this machine's CPU figures for forgetmap.cost and write them to a rates file.

What a job's time is made of is measured the way the jobs spend it: a process that starts, imports what a
model job imports and loads a model (`start_s`), and the same forked from a warm server (`warm_start_s`: a
client process, the model loaded with its imports done); a checkpoint written and read back (the load
rate); and forgetmap's own training loop, scorer and decode loop on a model of the given architecture with
random weights and random tokens, each at two sizes of work with the same number of passes, so that the
seconds of a pass (launches, Python) and the FLOP rate come apart. The figures are written under the device
`cpu`, with the machine, the threads, the date and the commit they were measured at.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import cost

DEMO = {"hidden_size": 128, "intermediate_size": 384, "layers": 4, "heads": 4, "max_position_embeddings": 256}
VOCAB = 512


def _encoded(rng, n: int, length: int):
    from .data.chat import Encoded

    return [Encoded(rng.integers(4, VOCAB, length), 1, length) for _ in range(n)]


def _timed(fn, repeats: int = 3) -> float:
    """The least of `repeats` runs (after one unmeasured): what the work costs without the machine's noise."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _split(passes: float, small: tuple[float, float], large: tuple[float, float]) -> dict:
    """Seconds per pass and FLOP rate from two runs of `passes` passes: (FLOPs, seconds) each."""
    (f1, t1), (f2, t2) = small, large
    rate = (f2 - f1) / max(t2 - t1, 1e-9)
    pass_s = max(0.0, (t1 - f1 / rate) / passes)
    return {"flops_per_s": rate, "pass_s": pass_s}


def measure(architecture: dict, threads: int, steps: int = 8) -> dict:
    """The figures of `threads` CPU threads for the training loop, the scorer and the decode loop."""
    from .data.batches import task_batches
    from .generation import generate_torch
    from .memory import shape
    from .models import set_threads
    from .nll import TorchScorer
    from .train import train

    set_threads(threads)

    class Ids:  # what the loops need of a tokenizer: pad and end ids (random tokens never end)
        pad_token_id, eos_token_id = 0, 1

        def decode(self, ids, **kwargs):
            return ""

        def batch_decode(self, rows, **kwargs):
            return ["" for _ in rows]

    model = _random_model(architecture)
    size = shape(model.config)
    params = cost.multiplying_parameters(size)
    rng = np.random.default_rng(0)
    settings = {"lr": 1e-4, "warmup_steps": 0, "weight_decay": 0.0, "max_grad_norm": 1.0, "bf16": False,
                "gradient_checkpointing": False}
    figures = {}

    def fwd(length):
        return cost.forward_flops(params, size.layers, size.hidden, length / 2)

    runs = []
    for length in (24, 96):
        examples = _encoded(rng, 16, length)
        seconds = _timed(lambda: train(model, task_batches(examples, 16, 1, 0), steps, settings, 0, None))
        runs.append((steps * 16 * length * 3 * fwd(length), seconds))
    figures["train"] = _split(steps, *runs)

    scorer = TorchScorer(model, 0, token_budget=4096)
    runs = []
    for length in (16, 64):  # 64 rows each: the same number of batches (the budget holds them all)
        examples = _encoded(rng, 64, length)
        seconds = _timed(lambda: scorer.score(examples))
        runs.append((64 * length * fwd(length), seconds))
    figures["score"] = _split(len(scorer.plan(_encoded(rng, 64, 64))), *runs)

    runs = []
    new = 16
    for rows in (2, 32):  # one batch each: the same decode steps, more rows in each
        contexts = [rng.integers(4, VOCAB, 16) for _ in range(rows)]
        limits = np.full(rows, new)
        seconds = _timed(lambda: generate_torch(model, Ids(), contexts, limits, token_budget=8192))
        runs.append((rows * new * fwd(16 + new), seconds))
    figures["generate"] = _split(new, *runs)
    return figures


def _random_model(architecture: dict):
    """A Llama of the demo's kind at `architecture`'s widths, with seeded random weights."""
    import torch
    from transformers import LlamaForCausalLM

    from .models import demo_config

    torch.manual_seed(0)
    return LlamaForCausalLM(demo_config(VOCAB, architecture, 0, 1))


def start_seconds(model_dir: Path) -> float:
    """A model job's start: a process that imports what it imports and loads the model."""
    code = ("import sys; from forgetmap import cli, models, nll, train; import torch; "
            "models.load_model(sys.argv[1], torch.device('cpu'), torch.float32)")
    def run():
        subprocess.run([sys.executable, "-c", code, str(model_dir)], check=True, capture_output=True)
    return _timed(run, repeats=2)


def warm_start_seconds(model_dir: Path) -> float:
    """A job forked from a warm server (forgetmap.warm): its client process starting, and the model loaded with
    every import already done."""
    import torch

    from .models import load_model

    def client():
        subprocess.run([sys.executable, "-c", "import forgetmap.cli"], check=True, capture_output=True)
    return _timed(client, repeats=2) + _timed(lambda: load_model(model_dir, torch.device("cpu"), torch.float32))


def load_rate(directory: Path) -> float:
    """Bytes per second of a checkpoint written and read back (64 MB of weights)."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = {"w": torch.zeros(16 * 2**20)}
    path = directory / "w.safetensors"

    def roundtrip():
        save_file(weights, path)
        load_file(path)
    return 2 * 64 * 2**20 / _timed(roundtrip)


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def calibrate_command(threads: int, out: str | None) -> dict:
    """Measure the CPU figures with `threads` threads and write them into the rates file (`out`, else the
    package's), beside the figures of other devices."""
    from .config.times import cpu_name
    from .models import save_model

    path = Path(out) if out else cost.RATES
    figures = measure(DEMO, threads)
    with tempfile.TemporaryDirectory() as tmp:
        save_model(_random_model(DEMO), tmp)
        start = start_seconds(Path(tmp))
        warm = warm_start_seconds(Path(tmp))
        load = load_rate(Path(tmp))
    machine = cpu_name()
    entry = {"kind": "cpu", "machine": machine, "threads": threads, "start_s": round(start, 3),
             "warm_start_s": round(warm, 3),
             "load_bytes_per_s": round(load), "rates": {k: {"flops_per_s": float(f"{v['flops_per_s']:.4g}"),
                                                          "pass_s": float(f"{v['pass_s']:.4g}")}
                                                      for k, v in figures.items()},
             "source": f"{machine}, {threads} thread(s), {datetime.date.today()}, commit {commit()} "
                       f"(forgetmap calibrate)"}
    rates = cost.read_rates(path)
    rates.setdefault("devices", {})["cpu"] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rates, indent=1) + "\n")
    return {"out": str(path), **{k: v for k, v in entry.items() if k != "source"}}
