"""The forgetting monitor, measured after the demo (docs/monitor.md; figures in BENCHMARKS.md):

1. how well the probes of a check part-way through training forecast each `check` task's measured final row
   (results/demo/forecast/trajectory.tsv, written by the demo's monitored fine-tunes), at the checks nearest
   10 / 25 / 50 / 100 % of the steps, beside the naive monitor (the probes' mean change for every example);
2. what a check costs inside forgetmap's fine-tunes (their logs): seconds against the training's, tokens
   against a full scoring of the upstream set;
3. the callback's overhead on a transformers `Trainer`: the demo's base fine-tuned on a check task as the
   demo does (50 steps of 16, an evaluation every 5 steps on 32 held-out examples), with and without the
   monitor, side by side in this process, alternating, `--repeats` times;
4. the replay the monitor steers (`ForecastReplay`), on the same fine-tune with a check every 5 steps: no
   replay, the forecast's targeted draw and a uniform draw at the same share of the rows (`--replay-share`),
   each judged by the mean NLL change on a held-out set of upstream examples neither replay may draw
   (`--heldout`), over `--seeds` seeds (the replay's draws and the task's order).

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
    from transformers import AutoModelForCausalLM, logging as hf_logging

    from forgetmap.monitor import ForecastMap, ForgettingMonitor

    hf_logging.set_verbosity_error()
    spec, base, tokenizer, data, _, forecast_map = demo_setup(workdir, model, task)
    times = {"plain": [], "monitored": []}
    for _ in range(repeats):
        for kind in times:
            torch.manual_seed(0)
            net = AutoModelForCausalLM.from_pretrained(base)
            with tempfile.TemporaryDirectory() as out:
                trainer = demo_trainer(net, data, tokenizer, spec, out, 42, eval_steps)
                if kind == "monitored":
                    ForgettingMonitor(ForecastMap.read(_written(forecast_map, out))).attach(trainer)
                started = time.perf_counter()
                trainer.train()
                times[kind].append(time.perf_counter() - started)
    plain, monitored = np.median(times["plain"]), np.median(times["monitored"])
    return {"task": task, "steps": spec["finetune"]["steps"], "evaluations": spec["finetune"]["steps"] // eval_steps,
            "plain_s": round(float(plain), 2), "monitored_s": round(float(monitored), 2),
            "overhead": round(float(monitored / plain - 1), 4), "repeats": repeats}


def replay(workdir: Path, model: str, task: str, share: float, heldout: int, seeds: int) -> dict:
    """Held-out forgetting after the check task's fine-tune without replay, with the targeted replay and with a
    uniform replay at the same share (the monitor checking every 5 steps, no budget)."""
    import torch
    from transformers import AutoModelForCausalLM, logging as hf_logging

    from forgetmap.data.chat import encode_examples
    from forgetmap.data.upstream import read_ids, read_rows
    from forgetmap.monitor import ForecastMap, ForecastReplay, ForgettingMonitor
    from forgetmap.nll import TorchScorer

    hf_logging.set_verbosity_error()
    spec, base, tokenizer, data, shards, forecast_map = demo_setup(workdir, model, task)
    rng = np.random.default_rng(0)
    candidates = np.setdiff1d(np.arange(len(forecast_map.example_ids)), forecast_map.known)
    held = np.sort(rng.choice(candidates, heldout, replace=False))
    held_ids = forecast_map.example_ids[held]
    position = {e: i for i, e in enumerate(read_ids([str(s) for s in shards]))}
    rows = read_rows([str(s) for s in shards], np.array([position[e] for e in held_ids]))
    encoded = encode_examples(tokenizer, rows, spec["chat_template"], spec["score"]["max_length"])

    def heldout_nll(net) -> np.ndarray:
        net.eval()
        nll, _ = TorchScorer(net, tokenizer.pad_token_id).score(encoded)
        return np.asarray(nll, np.float64)

    before = heldout_nll(AutoModelForCausalLM.from_pretrained(base))
    arms = {"none": None, "forecast": 0.1, "uniform": 1e9}  # the draw's temperature: the paper's, or uniform
    results: dict = {arm: [] for arm in arms}
    drawn: dict = {arm: [] for arm in arms}
    for seed in range(seeds):
        for arm, temperature in arms.items():
            torch.manual_seed(seed)
            net = AutoModelForCausalLM.from_pretrained(base)
            with tempfile.TemporaryDirectory() as out:
                trainer = demo_trainer(net, data, tokenizer, spec, out, seed, eval_steps=None)
                if temperature is not None:
                    mix = ForecastReplay([str(s) for s in shards], share=share, max_share=share,
                                         temperature=temperature, exclude=held_ids)
                    ForgettingMonitor(ForecastMap.read(_written(forecast_map, out)), every=5, replay=mix).attach(trainer)
                trainer.train()
                results[arm].append(float(np.mean(heldout_nll(net) - before)))
                if temperature is not None:
                    drawn[arm].append(sum(mix.drawn().values()))
    return {"task": task, "share": share, "heldout": heldout, "seeds": seeds,
           **{f"{arm}_heldout_z": round(float(np.mean(v)), 4) for arm, v in results.items()},
           **{f"{arm}_heldout_z_per_seed": [round(x, 4) for x in v] for arm, v in results.items()},
           **{f"{arm}_rows_drawn": int(np.mean(v)) for arm, v in drawn.items() if v}}


def demo_setup(workdir: Path, model: str, task: str):
    """The demo's config for `model`, its base, tokenizer, the task's rows (tokenized as the demo fine-tunes them),
    the upstream shards and a forecast map from the demo's matrix."""
    import yaml
    from datasets import Dataset

    from forgetmap.config import fit_tasks, resolve
    from forgetmap.data.chat import encode_chat
    from forgetmap.models import load_tokenizer
    from forgetmap.monitor import ForecastMap

    cfg = resolve(yaml.safe_load((workdir / "config/config.yaml").read_text()))
    spec = cfg["models"][model]
    base = workdir / f"results/{model}/base"
    tokenizer = load_tokenizer(base)
    frame = pd.read_parquet(min(workdir.glob(f"results/data/tasks/{task}.*.parquet")))
    encoded = encode_chat(tokenizer, frame["prompt"].tolist(), frame["response"].tolist(), spec["chat_template"],
                          spec["finetune"]["max_length"])
    data = Dataset.from_dict({"input_ids": [list(e.ids) for e in encoded]})
    shards = sorted((workdir / "results/data/upstream").glob("*/shard-*.parquet"))
    forecast_map = ForecastMap.from_matrix(workdir / f"results/{model}/forgetting.parquet", [str(s) for s in shards],
                                           fit_tasks=fit_tasks(cfg, model), k=cfg["forecast"]["k"],
                                           chat_template=spec["chat_template"], max_length=spec["score"]["max_length"])
    return spec, base, tokenizer, data, shards, forecast_map


def demo_trainer(net, data, tokenizer, spec, out: str, seed: int, eval_steps: int | None):
    """The demo's fine-tune of `net` as a transformers Trainer: 32 rows held out for the evaluation (every
    `eval_steps`, or none), the rest trained on."""
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    evaluate = dict(eval_strategy="steps", eval_steps=eval_steps, per_device_eval_batch_size=32) if eval_steps else {}
    args = TrainingArguments(output_dir=out, max_steps=spec["finetune"]["steps"], use_cpu=True, seed=seed,
                             per_device_train_batch_size=spec["finetune"]["batch_size"],
                             learning_rate=spec["finetune"]["lr"], save_strategy="no", report_to="none",
                             disable_tqdm=True, logging_strategy="no", **evaluate)
    return Trainer(model=net, args=args, train_dataset=data.select(range(32, len(data))),
                   eval_dataset=data.select(range(32)) if eval_steps else None, processing_class=tokenizer,
                   data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))


def along_training(spec, base, tokenizer, data, seed: int, every: int, measuring) -> tuple[list[int], object, list]:
    """(the check steps, what `measuring(net)` measures at step 0, and at every `every` steps): the demo's fine-tune
    of `base` on `data` (seed `seed`), measured by the callable `measuring(net)` returns, on the weights as they
    train."""
    import torch
    from transformers import AutoModelForCausalLM, TrainerCallback

    torch.manual_seed(seed)
    net = AutoModelForCausalLM.from_pretrained(base)
    measure = measuring(net)
    before = measure()
    steps, values = [], []

    class Along(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % every == 0:
                steps.append(state.global_step)
                values.append(measure())

    with tempfile.TemporaryDirectory() as out:
        trainer = demo_trainer(net, data, tokenizer, spec, out, seed, eval_steps=None)
        trainer.add_callback(Along())
        trainer.train()
    return steps, before, values


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
    parser.add_argument("--replay-share", type=float, default=0.25, help="the replayed share of the rows")
    parser.add_argument("--heldout", type=int, default=500, help="upstream examples neither replay draws, judged on")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], choices=("accuracy", "overhead", "replay"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    pd.set_option("display.width", 160)
    if "accuracy" not in args.skip:
        print("forecast against the measured final row, mean over the check tasks:")
        print(accuracy(args.workdir, args.model).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        print("cost inside the demo's fine-tunes:", json.dumps(costs(args.workdir, args.model)))
    if "overhead" not in args.skip:
        for every in args.eval_steps:
            print("the callback's overhead on a Trainer:", json.dumps(overhead(args.workdir, args.model, args.task,
                                                                               args.repeats, every)))
    if "replay" not in args.skip:
        print("the monitor's replay, held-out forgetting:", json.dumps(replay(
            args.workdir, args.model, args.task, args.replay_share, args.heldout, args.seeds)))


if __name__ == "__main__":
    main()
