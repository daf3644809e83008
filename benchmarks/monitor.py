"""The forgetting monitor, measured after the demo (docs/monitor.md; figures in BENCHMARKS.md):

1. how well the probes of a check part-way through training forecast each `check` task's measured final row
   (results/demo/forecast/trajectory.tsv, written by the demo's monitored fine-tunes), at the checks nearest
   10 / 25 / 50 / 100 % of the steps, beside the naive monitor (the probes' mean change for every example);
2. what a check costs inside forgetmap's fine-tunes (their logs): seconds against the training's, tokens
   against a full scoring of the upstream set;
3. the callback's overhead on a transformers `Trainer`: the demo's base fine-tuned on a check task as the
   demo does (50 steps of 16, an evaluation every 5 steps on 32 held-out examples), with and without the
   monitor, side by side in this process, alternating, `--repeats` times.

    python benchmarks/monitor.py --workdir .   # after the demo
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

FRACTIONS = (0.1, 0.25, 0.5, 1.0)


def accuracy(workdir: Path, model: str) -> pd.DataFrame:
    table = pd.read_csv(workdir / f"results/{model}/forecast/trajectory.tsv", sep="\t")
    table = table[table["rmse"].notna()]
    rows = []
    for target in FRACTIONS:  # each task's check nearest the share
        nearest = table.assign(d=(table["fraction"] - target).abs()).sort_values(["task", "d", "fraction"])
        picked = nearest.groupby("task").head(1)
        rows.append({"share": target, "fractions": ",".join(f"{f:g}" for f in sorted(set(picked["fraction"]))),
                     "tasks": len(picked), **{c: picked[c].mean() for c in (
                         "rmse", "naive_rmse", "top_q_f1", "coverage_0.9", "mean_error", "naive_mean_error")}})
    return pd.DataFrame(rows)


def costs(workdir: Path, model: str) -> dict:
    import pyarrow.parquet as pq

    tasks = pd.read_csv(workdir / f"results/{model}/forecast/trajectory.tsv", sep="\t")["task"].unique()
    seconds, monitor, baseline, tokens = 0.0, 0.0, 0.0, []
    for task in tasks:
        log = (workdir / f"results/logs/{model}/finetune/{task}.log").read_text().splitlines()
        summary = json.loads(next(line for line in reversed(log) if line.startswith("{")))
        seconds += summary["seconds"]
        monitor += summary["monitor_seconds"]
        baseline += summary["monitor_baseline_seconds"]
        tokens.append(summary["monitor_tokens_per_check"])
        checks = summary["monitor_checks"]
    upstream = sum(int(pq.read_table(p, columns=["n_tokens"]).column(0).to_numpy().sum())
                   for p in sorted((workdir / f"results/{model}/scores/base").glob("shard-*.parquet")))
    in_loop = monitor - baseline  # the checks inside the training loop's time
    return {"tasks": len(tasks), "checks_per_finetune": checks, "seconds_per_check": in_loop / (checks * len(tasks)),
            "monitor_share_of_training": monitor / (seconds - in_loop), "tokens_per_check": float(np.mean(tokens)),
            "upstream_tokens": upstream, "upstream_per_check": upstream / float(np.mean(tokens))}


def overhead(workdir: Path, model: str, task: str, repeats: int, eval_steps: int) -> dict:
    import torch
    from datasets import Dataset
    from transformers import (AutoModelForCausalLM, DataCollatorForLanguageModeling, Trainer, TrainingArguments,
                              logging as hf_logging)

    from forgetmap.config import fit_tasks, resolve
    from forgetmap.data.chat import encode_chat
    from forgetmap.models import load_tokenizer
    from forgetmap.monitor import ForecastMap, ForgettingMonitor

    hf_logging.set_verbosity_error()
    import yaml

    cfg = resolve(yaml.safe_load((workdir / "config/config.yaml").read_text()))
    spec = cfg["models"][model]
    base = workdir / f"results/{model}/base"
    tokenizer = load_tokenizer(base)
    frame = pd.read_parquet(workdir / f"results/data/tasks/{task}.parquet")
    encoded = encode_chat(tokenizer, frame["prompt"].tolist(), frame["response"].tolist(), spec["chat_template"],
                          spec["finetune"]["max_length"])
    data = Dataset.from_dict({"input_ids": [list(e.ids) for e in encoded]})
    shards = sorted((workdir / "results/data/upstream").glob("*/shard-*.parquet"))
    forecast_map = ForecastMap.from_matrix(workdir / f"results/{model}/forgetting.parquet", [str(s) for s in shards],
                                           fit_tasks=fit_tasks(cfg, model), k=cfg["forecast"]["k"],
                                           chat_template=spec["chat_template"], max_length=spec["score"]["max_length"])
    times = {"plain": [], "monitored": []}
    for _ in range(repeats):
        for kind in times:
            torch.manual_seed(0)
            net = AutoModelForCausalLM.from_pretrained(base)
            with tempfile.TemporaryDirectory() as out:
                args = TrainingArguments(output_dir=out, max_steps=spec["finetune"]["steps"], use_cpu=True,
                                         per_device_train_batch_size=spec["finetune"]["batch_size"],
                                         learning_rate=spec["finetune"]["lr"], eval_strategy="steps", eval_steps=eval_steps,
                                         per_device_eval_batch_size=32, save_strategy="no", report_to="none",
                                         disable_tqdm=True, logging_strategy="no")
                trainer = Trainer(model=net, args=args, train_dataset=data.select(range(32, len(data))),
                                  eval_dataset=data.select(range(32)), processing_class=tokenizer,
                                  data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
                if kind == "monitored":
                    ForgettingMonitor(ForecastMap.read(_written(forecast_map, out))).attach(trainer)
                started = time.perf_counter()
                trainer.train()
                times[kind].append(time.perf_counter() - started)
    plain, monitored = np.median(times["plain"]), np.median(times["monitored"])
    return {"task": task, "steps": spec["finetune"]["steps"], "evaluations": spec["finetune"]["steps"] // eval_steps,
            "plain_s": round(float(plain), 2), "monitored_s": round(float(monitored), 2),
            "overhead": round(float(monitored / plain - 1), 4), "repeats": repeats}


def _written(forecast_map, out: str) -> str:
    path = Path(out) / "map.parquet"
    forecast_map.write(path)
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("."))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--task", default="mul_qa", help="the check task the overhead's fine-tune trains on")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eval-steps", type=int, nargs="+", default=[5, 25], help="evaluation (and check) cadences")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    pd.set_option("display.width", 160)
    print("forecast against the measured final row, mean over the check tasks:")
    print(accuracy(args.workdir, args.model).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("cost inside the demo's fine-tunes:", json.dumps(costs(args.workdir, args.model)))
    for every in args.eval_steps:
        print("the callback's overhead on a Trainer:", json.dumps(overhead(args.workdir, args.model, args.task,
                                                                           args.repeats, every)))


if __name__ == "__main__":
    main()
