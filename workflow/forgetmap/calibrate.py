"""`forgetmap calibrate`: measure this machine's CPU figures for the job time estimates (forgetmap.cost) and write
them to a rates file.

What a job's time is made of is measured the way the jobs spend it (forgetmap.cost.harness): start-up cold and
forked from a warm server, the load rate, and the training loop, scorer and decode loop at two sizes of work each, so
that the seconds of a pass and the FLOP rate come apart; and here the real scoring job and fine-tune on a generated
corpus and task, whose seconds beyond all of that are each job's setup (its tokenizer, reading, checks, writing),
beside the seconds tokenizing one example takes.

A local run fills the machine (`--cores N` runs N / threads jobs at once), so the figures are measured as it runs
them: `jobs` processes measuring at once (default: the CPUs / threads), their figures' medians written under this CPU
model's own entry (`forgetmap.cost.rates.cpu_key`: another model's figures stay), with the machine, the threads, the
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
from pathlib import Path

from .cost.harness import DEMO, VOCAB, load_rate, measure, random_model, start_seconds, timed, together, \
    warm_start_seconds
from .cost.rates import RATES, VERSION, cpu_key, read_rates
from .io import atomic_path


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

    path = Path(out) if out else RATES
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
    rates = {**read_rates(path), "version": VERSION}
    rates.setdefault("devices", {})[cpu_key(machine)] = entry  # another CPU model's figures are kept
    with atomic_path(path) as tmp:  # whole or as it was
        tmp.write_text(json.dumps(rates, indent=1) + "\n")
    return {"out": str(path), **{k: v for k, v in entry.items() if k != "source"}}


def probe_command(partition: str, out: str) -> dict:
    """The CPU probe (forgetmap.cost.probe) run on this machine as a cluster partition's job, its figures written to
    `out` (whole or not at all) with the CPU model and the partition: what the plan sizes that partition's CPU jobs
    by. One that cannot run writes why (`failed`), and the plan borrows figures, saying so."""
    from .cost.probe import measured_here
    from .devices import cpu_name, usable_cpus

    machine = cpu_name()
    found = {**measured_here(machine, 1, usable_cpus()), "machine": machine, "partition": partition,
             "where": f"partition {partition}'s probe job"}
    with atomic_path(out) as tmp:
        tmp.write_text(json.dumps(found, indent=1) + "\n")
    return {"out": out, "machine": machine, **({"failed": found["failed"]} if "failed" in found else
                                                      {"seconds": found["seconds"], "start_s": found["start_s"]})}
