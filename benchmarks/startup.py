"""Start-up overhead of forgetmap commands: `--help`, and a demo scoring job's time outside its work.

    python benchmarks/startup.py --checkpoint results/demo/base --shard results/data/upstream/demo/shard-0.parquet
    python benchmarks/startup.py ... --compare /path/to/other/checkout/workflow   # side by side

Each measurement is a fresh process (as every Snakemake job is), single-threaded, repeated; the
median is printed. A scoring job's overhead is its wall time minus the scoring it reports itself
(`seconds` in its JSON summary): interpreter start, imports, tokenizer and model loading, writing;
`import_floor_s` is the part of it no job can avoid (the interpreter importing torch, transformers'
Llama, pandas and pyarrow).
With `--compare`, the same commands run with another checkout's package first on PYTHONPATH.
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


def timed(command: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, done.stdout


def measure(package: str | None, args) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    if package:
        env["PYTHONPATH"] = package
    cli = [sys.executable, "-m", "forgetmap"]
    helps = [timed(cli + ["--help"], env)[0] for _ in range(args.repeats)]
    # the floor no scoring job can go under: the interpreter plus torch, transformers' Llama and pyarrow
    floor = [timed([sys.executable, "-c", "import torch, pyarrow.parquet, pandas; "
                    "import transformers.models.llama.modeling_llama"], env)[0] for _ in range(args.repeats)]
    overheads, totals = [], []
    settings = json.dumps({"backend": "torch", "token_budget": 8192, "max_padding": None, "max_length": 96,
                           "device": "cpu", "dtype": "auto", "attention": "auto", "gpu_memory_utilization": 0.85,
                           "chat_template": "olmo", "processes": 1})
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            out = f"{tmp}/scores-{i}.parquet"
            total, stdout = timed(cli + ["score", "--model-dir", args.checkpoint, "--shard", args.shard,
                                         "--settings", settings, "--threads", "1", "--out", out], env)
            work = json.loads(stdout.strip().splitlines()[-1])["seconds"]
            totals.append(total)
            overheads.append(total - work)
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
    rows = {"this checkout": measure(None, args)}
    if args.compare:
        rows[args.compare] = measure(args.compare, args)
    for name, row in rows.items():
        print(json.dumps({"package": name, **{k: round(v, 3) for k, v in row.items()}}))


if __name__ == "__main__":
    main()
