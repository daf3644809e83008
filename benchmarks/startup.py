"""Start-up overhead of forgetmap commands: `--help`, and a demo scoring job's time outside its work.

    python benchmarks/startup.py --checkpoint results/demo/base --shard results/data/upstream/demo/shard-0.parquet
    python benchmarks/startup.py ... --compare /path/to/other/checkout/workflow   # side by side

Each row is measured twice, side by side: cold (every command a fresh process, `warm_start: false`)
and warm (the commands sent to a warm-start server, as a local workflow run does; forgetmap.forkserver).

Each measurement is a command started as a Snakemake job starts it, single-threaded, repeated; the
median is printed. A scoring job's overhead is its wall time minus the scoring it reports itself
(`seconds` in its JSON summary): interpreter start, imports, tokenizer and model loading, writing;
`import_floor_s` is the part of it no fresh process can avoid (the interpreter importing torch,
transformers' Llama, pandas and pyarrow). With `--compare`, the same commands run cold with another
checkout's package first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from forgetmap import forkserver
from forgetmap.plan import Plan

REPO = Path(__file__).resolve().parents[1]


def timed(command: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, done.stdout


def measure(package: str | None, args, warm: bool) -> dict:
    server = forkserver.start(os.devnull) if warm else None  # it puts its address in os.environ
    if warm:
        if server is None:
            raise SystemExit("warm start needs the `forgetmap` command on PATH")
        while not os.path.exists(server[1]):
            time.sleep(0.05)
    # a one-thread job's environment as Snakemake's shell gives it (the warm-start server's too)
    env = {**os.environ, **forkserver.ONE_THREAD_JOB}
    if not warm:
        env.pop(forkserver.ADDRESS, None)
    if package:
        env["PYTHONPATH"] = package
    cli = [sys.executable, "-m", "forgetmap"]
    helps = [timed(cli + ["--help"], env)[0] for _ in range(args.repeats)]
    # the floor no fresh process can go under: the interpreter plus torch, transformers' Llama and pyarrow
    floor = [timed([sys.executable, "-c", "import torch, pyarrow.parquet, pandas; "
                    "import transformers.models.llama.modeling_llama"], env)[0] for _ in range(args.repeats)]
    overheads, totals = [], []
    # the demo's score settings, as the workflow plans them
    plan = Plan(yaml.safe_load((REPO / "config/config.yaml").read_text()))
    settings = json.dumps(plan.score_settings(next(iter(plan.cfg["models"]))))
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            out = f"{tmp}/scores-{i}.parquet"
            total, stdout = timed(cli + ["score", "--model-dir", args.checkpoint, "--shard", args.shard,
                                         "--settings", settings, "--threads", "1", "--out", out], env)
            work = json.loads(stdout.strip().splitlines()[-1])["seconds"]
            totals.append(total)
            overheads.append(total - work)
    forkserver.stop(server)
    return {"help_s": statistics.median(helps), "import_floor_s": statistics.median(floor),
            "score_job_s": statistics.median(totals),
            "score_overhead_s": statistics.median(overheads)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a model directory to score with")
    parser.add_argument("--shard", required=True, help="an upstream shard parquet")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compare", default=None, help="another checkout's workflow/ directory")
    args = parser.parse_args()
    rows = {"this checkout, cold": measure(None, args, warm=False),
            "this checkout, warm": measure(None, args, warm=True)}
    if args.compare:
        rows[args.compare] = measure(args.compare, args, warm=False)
    for name, row in rows.items():
        print(json.dumps({"package": name, **{k: round(v, 3) for k, v in row.items()}}))


if __name__ == "__main__":
    main()
