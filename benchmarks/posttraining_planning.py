"""Planning a post-training map at Harmon et al.'s scale: 30 checkpoints (3 bases with 10 post-trained rows
each, one chain among them) x 100 sub-benchmarks x 3 sampling seeds, planned by `snakemake --dry-run` as
a user's first command would (config checks, every checkpoint located in the HF cache and identified,
tokenizers compared, the corpus's ids and shards read, the DAG built).

The checkpoints are tiny stand-ins in a generated HF cache: reading real weights' identities adds about 5
MiB read per weight file (forgetmap.pretrained), a few seconds for 30 checkpoints from a local disk.

    python benchmarks/posttraining_planning.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

SOURCES, PER_SOURCE, BASES, ROWS = 100, 150, 3, 10


def corpus(path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for s in range(SOURCES):
        k = int(rng.integers(2, 6))
        options = [f"option {j}" for j in range(k)]
        for i in range(PER_SOURCE):
            rows.append({"example_id": f"b{s}-{i}", "source": f"bench_{s:03d}", "kind": "lm",
                         "text": f"Question {i} of benchmark {s}?", "prompt": f"Question {i} of benchmark {s}?\nAnswer:",
                         "choices": options, "answer": options[i % k]})
    pd.DataFrame(rows).to_parquet(path)


def config() -> dict:
    models = {}
    for b in range(BASES):
        checkpoints = {f"post{r}": {"path": f"org/base{b}-post{r}", "category": ["sft", "preference", "rl"][r % 3],
                                    **({"reference": f"post{r - 1}"} if 0 < r < 4 else {})} for r in range(ROWS)}
        models[f"base{b}"] = {
            "upstream": "bench", "base": {"kind": "pretrained", "path": f"org/base{b}"}, "shots": 5, "tasks": [],
            "checkpoints": checkpoints,
            "score": {"correctness": {"answers": "sampled", "seeds": 3, "max_new_tokens": 32768, "stop": []}},
            "resources": {s: {"gpu": 0, "mem_mb": 1000, "runtime": 60, "threads": 1}
                          for s in ("base", "finetune", "score", "semantic", "gradient", "analysis")}}
    return {"shard_size": 2000, "upstream": {"bench": {"format": "parquet", "path": "resources/bench.parquet",
                                                       "benchmark_categories": {f"cat{c}": [f"bench_{c}*"]
                                                                                for c in range(10)}}},
            "categories": {c: {"group": "in_domain"} for c in ("sft", "preference", "rl")}, "models": models}


def main() -> None:
    from helpers import make_workdir, snakemake
    from standins import TULU_TEMPLATE, cache_standin

    with tempfile.TemporaryDirectory() as tmp:
        workdir = make_workdir(Path(tmp) / "wf", config())
        (workdir / "resources").mkdir()
        corpus(workdir / "resources/bench.parquet")
        for b in range(BASES):
            cache_standin(workdir / "hub", f"org/base{b}", "llama", seed=b)
            for r in range(ROWS):
                cache_standin(workdir / "hub", f"org/base{b}-post{r}", "llama", TULU_TEMPLATE, seed=100 * b + r)
        env = {"HF_HUB_CACHE": str(workdir / "hub")}
        times = []
        for _ in range(3):
            start = time.perf_counter()
            proc = snakemake(workdir, "--dry-run", env=env)
            times.append(time.perf_counter() - start)
        jobs = proc.stdout.count("\nrule ") + proc.stdout.count("\nlocalrule ")
        print(f"{BASES * ROWS} checkpoints + {BASES} bases, {SOURCES} sub-benchmarks x {PER_SOURCE} items, 3 seeds: "
              f"{jobs} jobs planned; snakemake --dry-run {min(times):.1f}-{max(times):.1f} s (3 runs)")


if __name__ == "__main__":
    main()
