"""What forecasting a task saves: its k-probe scoring job against scoring every upstream shard.

On a finished demo (`snakemake --cores 2` first), side by side for each `check` task (forecast and
measured from the same checkpoint): tokens scored, the score jobs' scoring seconds (their logged
summaries) and wall seconds (their benchmark files, process start included), and the forecast's
accuracy against the measured row. At paper scale, the token ratio from a generated 141,871-example
corpus tokenized by the demo tokenizer (k probes drawn at random, 100 draws; no model is run).

    python benchmarks/forecast_cost.py --workdir .             # after the demo
    python benchmarks/forecast_cost.py --paper-scale           # the token ratio at 141,871 examples
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd


def logged_summary(log: Path) -> dict:
    """The command's JSON summary: the last line of its log."""
    return json.loads(log.read_text().strip().splitlines()[-1])


def demo_costs(workdir: Path, model: str) -> pd.DataFrame:
    summary = pd.read_csv(workdir / f"results/{model}/forecast/summary.tsv", sep="\t")
    rows = []
    for task in summary.loc[summary["measured"], "task"]:
        probe_log = workdir / f"results/logs/{model}/forecast/scores/{task}.log"
        shard_logs = sorted((workdir / f"results/logs/{model}/score/{task}").glob("shard-*.log"))
        probe_bench = workdir / f"results/benchmarks/{model}/forecast/scores/{task}.tsv"
        shard_benches = sorted((workdir / f"results/benchmarks/{model}/score/{task}").glob("shard-*.tsv"))
        probe, shards = logged_summary(probe_log), [logged_summary(p) for p in shard_logs]
        rows.append({"task": task, "probe_tokens": probe["tokens"], "full_tokens": sum(s["tokens"] for s in shards),
                     "probe_scoring_s": probe["seconds"], "full_scoring_s": sum(s["seconds"] for s in shards),
                     "probe_job_s": float(pd.read_csv(probe_bench, sep="\t")["s"].iloc[0]),
                     "full_jobs_s": sum(float(pd.read_csv(p, sep="\t")["s"].iloc[0]) for p in shard_benches),
                     "score_jobs": len(shards)})
    accuracy = summary[[c for c in summary if c == "task" or c in ("rmse", "top_q_f1", "precision_at_b")
                        or c.startswith("coverage_")]]
    costs = pd.DataFrame(rows).merge(accuracy, on="task")
    costs["token_ratio"] = costs["full_tokens"] / costs["probe_tokens"]
    costs["scoring_s_ratio"] = costs["full_scoring_s"] / costs["probe_scoring_s"]
    costs["job_s_ratio"] = costs["full_jobs_s"] / costs["probe_job_s"]
    return costs


def paper_scale(n: int, k: int, draws: int) -> dict:
    from forgetmap.base import pretraining_texts
    from forgetmap.data import demo
    from forgetmap.data.chat import encode_examples
    from forgetmap.models import train_demo_tokenizer

    tokenizer = train_demo_tokenizer(pretraining_texts(demo.upstream_corpus(2400, 1234)), 512)
    corpus = demo.upstream_corpus(n, 1234)
    encoded = encode_examples(tokenizer, corpus, "olmo", 4096)
    tokens = np.array([e.score_end - e.target_start for e in encoded], dtype=np.int64)  # scored tokens
    rng = np.random.default_rng(0)
    ratios = [tokens.sum() / tokens[rng.choice(n, k, replace=False)].sum() for _ in range(draws)]
    return {"examples": n, "k": k, "total_tokens": int(tokens.sum()), "ratio_mean": float(np.mean(ratios)),
            "ratio_min": float(np.min(ratios)), "ratio_max": float(np.max(ratios)), "draws": draws}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=".")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--paper-scale", action="store_true")
    parser.add_argument("--examples", type=int, default=141_871)
    parser.add_argument("--k", type=int, default=30)
    args = parser.parse_args()
    if args.paper_scale:
        print(json.dumps(paper_scale(args.examples, args.k, 100), indent=1))
        return
    costs = demo_costs(Path(args.workdir), args.model)
    pd.set_option("display.width", 200)
    columns = ["task", "probe_tokens", "full_tokens", "token_ratio", "probe_scoring_s", "full_scoring_s",
               "scoring_s_ratio", "probe_job_s", "full_jobs_s", "job_s_ratio", "rmse", "top_q_f1", "precision_at_b",
               "coverage_0.8", "coverage_0.9"]
    print(costs[[c for c in columns if c in costs]].round(3).to_string(index=False))
    print("mean", costs[[c for c in columns[1:] if c in costs]].mean().round(3).to_dict())


if __name__ == "__main__":
    main()
