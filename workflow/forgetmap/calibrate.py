"""`forgetmap calibrate`: measure this machine's CPU figures for forgetmap.cost and write them to a rates file.

What a job's time is made of is measured the way the jobs spend it: a process that starts, imports what a
model job imports and loads a model (`start_s`), and the same forked from a warm server (`warm_start_s`: a
client process, the model loaded with its imports done); a checkpoint written and read back (the load
rate); forgetmap's own training loop, scorer and decode loop on a model of the given architecture with
random weights and random tokens, each at two sizes of work with the same number of passes, so that the
seconds of a pass (launches, Python) and the FLOP rate come apart; and the real scoring job and fine-tune on
a generated corpus and task, whose seconds beyond all of that are each job's setup (its tokenizer, reading,
checks, writing), beside the seconds tokenizing one example takes.

A local run fills the machine (`--cores N` runs N / threads jobs at once), so the figures are measured as it
runs them: `jobs` processes measuring at once (default: the CPUs / threads), their figures' medians written
under this CPU model's own entry (`cost.cpu_key`: another model's figures stay), with the machine, the threads, the
processes, the date and the commit.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import cost

DEMO = {"hidden_size": 128, "intermediate_size": 384, "layers": 4, "heads": 4, "max_position_embeddings": 256}
VOCAB = 512


def _encoded(rng, n: int, length: int):
    from .data.chat import Encoded

    return [Encoded(rng.integers(4, VOCAB, length), 1, length) for _ in range(n)]


def timed(fn, repeats: int = 3) -> float:
    """The median of `repeats` runs (after one unmeasured): what the work costs as the machine runs it (jobs
    meet its noise too; the least of them would estimate every job low)."""
    fn()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def _split(passes: float, small: tuple[float, float], large: tuple[float, float]) -> dict:
    """Seconds per pass and FLOP rate from two runs of `passes` passes: (FLOPs, seconds) each."""
    (f1, t1), (f2, t2) = small, large
    rate = (f2 - f1) / max(t2 - t1, 1e-9)
    pass_s = max(0.0, (t1 - f1 / rate) / passes)
    return {"flops_per_s": rate, "pass_s": pass_s}


@dataclass(frozen=True)
class Run:
    """One timed run of a kind of work: its FLOPs and passes (as forgetmap.cost counts a job's) and what runs it."""

    flops: float
    passes: int
    run: object  # a callable


def runs(model, steps: int = 8) -> dict[str, tuple[Run, Run]]:
    """The training loop's, the scorer's and the decode loop's two runs on `model` (random tokens): each pair at two
    sizes of work with the same number of passes, so that the seconds of a pass and the FLOP rate come apart
    (`measure`); the larger of each is what a CPU probe times (forgetmap.probe)."""
    from .anatomy import shape
    from .data.batches import task_batches
    from .generation import generate_torch
    from .nll import TorchScorer
    from .train import train

    class Ids:  # what the loops need of a tokenizer: pad and end ids (random tokens never end)
        pad_token_id, eos_token_id = 0, 1

        def decode(self, ids, **kwargs):
            return ""

        def batch_decode(self, rows, **kwargs):
            return ["" for _ in rows]

    size = shape(model.config)
    params = cost.multiplying_parameters(size)
    rng = np.random.default_rng(0)
    settings = {"lr": 1e-4, "warmup_steps": 0, "weight_decay": 0.0, "max_grad_norm": 1.0, "bf16": False,
                "gradient_checkpointing": False}

    def fwd(length):
        return cost.forward_flops(params, size.layers, size.hidden, length / 2)

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
    from .models import set_threads

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

    from .models import demo_config

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

    from .models import load_model

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


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


SCORED = 400  # the generated corpus a calibration scoring job scores (the demo's mix, with its quiz items)


def job_figures(directory: Path, threads: int) -> dict:
    """The setup seconds of a scoring job and of a fine-tune, and the seconds one example takes to tokenize: the
    real jobs (forgetmap.score, forgetmap.train) on a generated corpus and task with a random demo model, each
    forked from a process that has imported what a warm server imports (`forked_jobs`: a local run's jobs start
    so), less what the estimate counts apart (tokenizing, loading and writing weights, and the computing their
    summaries time)."""
    import torch

    from .data.chat import encode_examples
    from .data.demo import upstream_corpus
    from .data.tasks import write_task
    from .models import build_demo_model, load_model, load_tokenizer, save_model, train_demo_tokenizer

    corpus = upstream_corpus(SCORED, seed=0)
    tokenizer = train_demo_tokenizer([t for column in ("text", "prompt", "response") for t in corpus[column].dropna()],
                                     VOCAB)
    model_dir = directory / "model"
    save_model(build_demo_model(tokenizer, DEMO, 0), model_dir)
    tokenizer.save_pretrained(model_dir)
    corpus.to_parquet(directory / "shard.parquet")
    write_task("city_qa", {"category": "calibration", "n_examples": 200, "validation_fraction": 0.1}, 0, 0,
               str(directory / "task.parquet"))
    loaded = load_tokenizer(model_dir)
    example_s = timed(lambda: encode_examples(loaded, corpus, "auto", 96)) / len(corpus)
    load_s = timed(lambda: load_model(model_dir, torch.device("cpu"), torch.float32))
    code = f"import json, sys; from forgetmap.calibrate import forked_jobs; print(json.dumps(forked_jobs(sys.argv[1], {threads})))"
    done = subprocess.run([sys.executable, "-c", code, str(directory)], check=True, capture_output=True, text=True)
    (score, score_s), (tuned, tuned_s) = json.loads(done.stdout.strip().splitlines()[-1])
    computed = score["seconds"] + score.get("correctness_seconds", 0.0)
    score_setup = score_s - computed - load_s - example_s * (len(corpus) + score.get("items", 0))
    train_setup = tuned_s - tuned["seconds"] - 2 * load_s - example_s * tuned["examples"]
    return {"setup_s": {"score": max(0.0, score_setup), "train": max(0.0, train_setup)}, "example_s": example_s}


def forked_jobs(directory: str, threads: int) -> list:
    """A scoring job and a fine-tune on `job_figures`'s files, each run in a child forked from this process once
    it has imported what a warm server imports (forgetmap.warm.preload): (summary, seconds), the faster of two."""
    from .warm import preload

    directory = Path(directory)
    preload()

    def score():
        from .config import with_defaults
        from .config.schema import SCORE
        from .score import score_shard

        settings = {**with_defaults(SCORE, {"device": "cpu", "token_budget": 8192, "max_length": 96}),
                    "chat_template": "auto", "ask": "item", "row": "calibration"}
        for key in ("answers", "seeds", "seed", "temperature", "top_p"):  # the plan's settings for option answers
            settings["correctness"].pop(key)
        return score_shard(str(directory / "model"), str(directory / "shard.parquet"), settings, threads,
                           str(directory / "scores.parquet"))

    def finetune():
        from .config import with_defaults
        from .config.schema import FINETUNE
        from .train import finetune_into

        settings = {**with_defaults(FINETUNE, {"device": "cpu", "steps": 8, "batch_size": 16, "max_length": 96,
                                               "lr": 1e-4, "max_epochs": None, "warmup_steps": 0}),
                    "chat_template": "auto"}
        into = directory / "tuned"
        into.mkdir(exist_ok=True)
        return finetune_into(str(directory / "model"), str(directory / "task.parquet"), into, settings, threads)

    return [min((_forked(job) for _ in range(2)), key=lambda r: r[1]) for job in (score, finetune)]


def _forked(job) -> tuple[dict, float]:
    """`job()`'s summary and wall seconds, run in a forked child (as forgetmap.warm runs a local run's jobs)."""
    read, write = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: the job, its summary through the pipe, and out without the parent's cleanup
        os.close(read)
        try:
            summary = job()
            os.write(write, json.dumps([summary, time.perf_counter() - started]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    if not text:
        raise RuntimeError("a calibration job failed in its forked process")
    summary, seconds = json.loads(text)
    return summary, seconds


def worker(threads: int) -> dict:
    """Every figure, measured in this process (one of the `jobs` measuring at once)."""
    from .models import save_model

    figures = {"rates": measure(DEMO, threads)}
    with tempfile.TemporaryDirectory() as tmp:
        save_model(random_model(DEMO), tmp)
        figures.update(start_s=start_seconds(Path(tmp)), warm_start_s=warm_start_seconds(Path(tmp)),
                       load_bytes_per_s=load_rate(Path(tmp)))
    with tempfile.TemporaryDirectory() as tmp:
        figures.update(job_figures(Path(tmp), threads))
    return figures


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


def measured_together(threads: int, jobs: int) -> list[dict]:
    """`worker`'s figures from `jobs` processes measuring at once (this process alone where `jobs` is 1)."""
    if jobs == 1:
        return [worker(threads)]
    code = f"import json; from forgetmap.calibrate import worker; print(json.dumps(worker({threads})))"
    return together(code, threads, jobs, "a calibration process")


def median_figures(results: list[dict]) -> dict:
    """Each figure's median over the processes that measured it."""
    med = statistics.median
    first = results[0]
    return {"start_s": med([r["start_s"] for r in results]), "warm_start_s": med([r["warm_start_s"] for r in results]),
            "load_bytes_per_s": med([r["load_bytes_per_s"] for r in results]),
            "example_s": med([r["example_s"] for r in results]),
            "setup_s": {k: med([r["setup_s"][k] for r in results]) for k in first["setup_s"]},
            "rates": {k: {f: med([r["rates"][k][f] for r in results]) for f in ("flops_per_s", "pass_s")}
                      for k in first["rates"]}}


def calibrate_command(threads: int, out: str | None, jobs: int | None = None) -> dict:
    """Measure the CPU figures with `threads` threads in `jobs` processes at once (default: as many as the CPUs
    hold) and write them into the rates file (`out`, else the package's), beside the figures of other devices."""
    from .devices import cpu_name, usable_cpus

    path = Path(out) if out else cost.RATES
    jobs = jobs or max(1, usable_cpus() // threads)
    figures = median_figures(measured_together(threads, jobs))
    machine = cpu_name()

    def g4(value: float) -> float:
        return float(f"{value:.4g}")

    entry = {"kind": "cpu", "machine": machine, "threads": threads, "processes": jobs,
             "start_s": round(figures["start_s"], 3), "warm_start_s": round(figures["warm_start_s"], 3),
             "load_bytes_per_s": round(figures["load_bytes_per_s"]),
             "setup_s": {k: round(v, 3) for k, v in figures["setup_s"].items()}, "example_s": g4(figures["example_s"]),
             "rates": {k: {"flops_per_s": g4(v["flops_per_s"]), "pass_s": g4(v["pass_s"])}
                       for k, v in figures["rates"].items()},
             "source": f"{machine}, {threads} thread(s) in each of {jobs} processes at once, {datetime.date.today()}, "
                       f"commit {commit()} (forgetmap calibrate)"}
    rates = cost.read_rates(path)
    rates.setdefault("devices", {})[cost.cpu_key(machine)] = entry  # another CPU model's figures are kept
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rates, indent=1) + "\n")
    return {"out": str(path), **{k: v for k, v in entry.items() if k != "source"}}
