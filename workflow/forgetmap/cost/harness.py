"""The work the calibration and the CPU probe time, as the jobs spend it: forgetmap's own training loop, scorer and
decode loop on a Llama of the demo's kind with random weights and random tokens (`runs`: each at two sizes of work
with the same number of passes, so that the seconds of a pass, launches and Python, and the FLOP rate come apart);
a process that starts, imports what a model job imports and loads a model (`start_seconds`), the same forked from a
warm server (`warm_start_seconds`), a checkpoint written and read back (`load_rate`); and processes measuring at once
(`together`), as a local run's jobs meet the machine.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .work import forward_flops, multiplying_parameters

DEMO = {"hidden_size": 128, "intermediate_size": 384, "layers": 4, "heads": 4, "max_position_embeddings": 256}
VOCAB = 512


def _encoded(rng, n: int, length: int):
    from ..data.chat import Encoded

    return [Encoded(rng.integers(4, VOCAB, length), 1, length) for _ in range(n)]


def timed(fn, repeats: int = 3, clock=time.perf_counter) -> float:
    """The median of `repeats` runs (after one unmeasured): what the work costs as the machine runs it (jobs
    meet its noise too; the least of them would estimate every job low). `clock`: wall time, or this process's
    CPU time (`time.process_time`: the work's own, whatever share of the CPUs other work left it)."""
    fn()
    seconds = []
    for _ in range(repeats):
        started = clock()
        fn()
        seconds.append(clock() - started)
    return statistics.median(seconds)


def _split(passes: float, small: tuple[float, float], large: tuple[float, float]) -> dict:
    """Seconds per pass and FLOP rate from two runs of `passes` passes: (FLOPs, seconds) each."""
    (f1, t1), (f2, t2) = small, large
    rate = (f2 - f1) / max(t2 - t1, 1e-9)
    pass_s = max(0.0, (t1 - f1 / rate) / passes)
    return {"flops_per_s": rate, "pass_s": pass_s}


@dataclass(frozen=True)
class Run:
    """One timed run of a kind of work: its FLOPs and passes (as forgetmap.cost.work counts a job's) and what runs it."""

    flops: float
    passes: int
    run: object  # a callable


def runs(model, steps: int = 8) -> dict[str, tuple[Run, Run]]:
    """The training loop's, the scorer's and the decode loop's two runs on `model` (random tokens): each pair at two
    sizes of work with the same number of passes, so that the seconds of a pass and the FLOP rate come apart
    (`measure`); the larger of each is what a CPU probe times (forgetmap.cost.probe)."""
    from ..anatomy import shape
    from ..data.batches import task_batches
    from ..generation import generate_torch
    from ..nll import TorchScorer
    from ..train import train

    class Ids:  # what the loops need of a tokenizer: pad and end ids (random tokens never end)
        pad_token_id, eos_token_id = 0, 1

        def decode(self, ids, **kwargs):
            return ""

        def batch_decode(self, rows, **kwargs):
            return ["" for _ in rows]

    size = shape(model.config)
    params = multiplying_parameters(size)
    rng = np.random.default_rng(0)
    settings = {"lr": 1e-4, "warmup_steps": 0, "weight_decay": 0.0, "max_grad_norm": 1.0, "bf16": False,
                "gradient_checkpointing": False}

    def fwd(length):
        return forward_flops(params, size.layers, size.hidden, length / 2)

    def training(examples):
        return lambda: train(model, task_batches(examples, 16, 1, 0), steps, settings, 0, None)

    out = {"train": tuple(Run(steps * 16 * length * 3 * fwd(length), steps, training(_encoded(rng, 16, length)))
                          for length in (24, 96))}
    scorer = TorchScorer(model, 0, token_budget=4096)
    passes = len(scorer.plan(_encoded(rng, 64, 64)))  # 64 rows each: the same batches (the budget holds them all)
    out["score"] = tuple(Run(64 * length * fwd(length), passes, lambda e=_encoded(rng, 64, length): scorer.score(e))
                         for length in (16, 64))
    new = 16

    def decoding(rows):  # one batch each: the same decode steps, more rows in each
        contexts = [rng.integers(4, VOCAB, 16) for _ in range(rows)]
        return lambda: generate_torch(model, Ids(), contexts, np.full(rows, new), token_budget=8192)

    out["generate"] = tuple(Run(rows * new * fwd(16 + new), new, decoding(rows)) for rows in (2, 32))
    return out


def measure(architecture: dict, threads: int, steps: int = 8) -> dict:
    """The figures of `threads` CPU threads for the training loop, the scorer and the decode loop."""
    from ..models import set_threads

    set_threads(threads)
    figures = {}
    for kind, pair in runs(random_model(architecture), steps).items():
        small, large = ((run.flops, timed(run.run)) for run in pair)
        figures[kind] = _split(pair[0].passes, small, large)
    return figures


def random_model(architecture: dict):
    """A Llama of the demo's kind at `architecture`'s widths, with seeded random weights."""
    import torch
    from transformers import LlamaForCausalLM

    from ..models import demo_config

    torch.manual_seed(0)
    return LlamaForCausalLM(demo_config(VOCAB, architecture, 0, 1))


def start_seconds(model_dir: Path) -> float:
    """A model job's start: a process that imports what it imports and loads the model."""
    code = ("import sys; from forgetmap import cli, models, nll, train; import torch; "
            "models.load_model(sys.argv[1], torch.device('cpu'), torch.float32)")
    def run():
        subprocess.run([sys.executable, "-c", code, str(model_dir)], check=True, capture_output=True)
    return timed(run, repeats=1)


def warm_start_seconds(model_dir: Path) -> float:
    """A job forked from a warm server (forgetmap.warm): its client process starting, and the model loaded with
    every import already done."""
    import torch

    from ..models import load_model

    def client():
        subprocess.run([sys.executable, "-c", "import forgetmap.cli"], check=True, capture_output=True)
    return timed(client, repeats=1) + timed(lambda: load_model(model_dir, torch.device("cpu"), torch.float32))


def load_rate(directory: Path) -> float:
    """Bytes per second of a checkpoint written and read back (64 MB of weights)."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = {"w": torch.zeros(16 * 2**20)}
    path = directory / "w.safetensors"

    def roundtrip():
        save_file(weights, path)
        load_file(path)
    return 2 * 64 * 2**20 / timed(roundtrip)



def _die_with_parent() -> None:  # a worker whose calibration was ended must not measure on
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def together(code: str, threads: int, jobs: int, what: str) -> list[dict]:
    """What `jobs` Python processes of `threads` threads, each running `code` at once, print last (JSON): the
    figures of processes measuring as a run's jobs meet the machine. `what` names them where one fails."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, preexec_fn=_die_with_parent) for _ in range(jobs)]
    results = []
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"{what} failed:\n{err[-2000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results
