"""A benchmark's accuracy, F and BT forecast in the loop from k scored items, against the truth at every check
(docs/monitor.md; BENCHMARKS.md).

After the demo: each of its `check` tasks is fine-tuned as the demo fine-tunes it (a transformers `Trainer`, the
demo's steps, batch and rate; `--seeds` seeds of the task's order), and at every `--every` steps every
multiple-choice quiz item is scored (asked as the demo's score jobs ask them; with `--generated` the free-form
ones too, answered greedily), so accuracy, F (right at step 0, wrong now) and BT (the reverse) of the weights at
each check are known. Then, at each check, for `--draws` draws
of k items (uniform, without replacement: what the monitor's `choose="random"` draws):

- the map's forecast (forgetmap.monitor.items: the correctness map of the demo's 12 fit tasks, from its
  transitions file; the check tasks are never among its rows), from k = 30, by `--methods`;
- the naive estimate from the same 30 (their own shares, exact binomial intervals), and from 60 and 100;
- an item-response estimate (tinyBenchmarks' p-IRT: a two-parameter logistic model fitted on the same rows, the
  ability placed from the scored items) from 30 and from 100 items;
- the margins' estimate (forgetmap.correctness.margins: the k items' option margins now against every item's at
  step 0, its interval calibrated on the map's rows' margins from their score files) from each of `--margin-k`
  items, on the multiple-choice items (with `--generated`, those among the quiz).

Printed: per estimate and rate, the mean absolute error against the truth and its interval's coverage at
`--level` (every task, seed, check and draw); the truth's typical size; and the trajectory of one task's F over
its steps against the truth.

    python benchmarks/monitor_items.py --workdir . --seeds 2 --truths item-truths.npz   # after the demo
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from monitor import along_training, demo_setup, demo_trainer  # noqa: E402

RATES = ("acc", "F", "BT")


def quiz(workdir: Path, model: str, tokenizer, generated: bool = False):
    """The demo's multiple-choice items (with `generated`, its free-form items too), asked as its score jobs ask the
    base's (forgetmap.plan)."""
    import yaml

    from forgetmap.correctness.benchmark import from_frame
    from forgetmap.plan import Plan

    settings = Plan(yaml.safe_load((workdir / "config/config.yaml").read_text()), {}).score_settings(model)
    asked = {**settings["correctness"], "chat_template": settings["chat_template"], "shots": settings.get("shots", 0),
             "ask": settings.get("ask"), "row": settings.get("row"), "positions": None,
             "token_budget": settings["token_budget"]}
    shards = sorted((workdir / "results/data/upstream").glob("*/shard-*.parquet"))
    frame = pd.concat([pd.read_parquet(s) for s in shards], ignore_index=True)
    frame = frame[frame["answer"].notna()].reset_index(drop=True)
    return from_frame(frame, tokenizer, asked, "the demo's quiz", generate=generated)


def truths(workdir: Path, model: str, task: str, seed: int, every: int, benchmark):
    """(the check steps, every item's 0/1 at step 0, and at each check (checks x N), every item's option margin at
    step 0 and at each check (NaN for a free-form item))."""
    from transformers import logging as hf_logging

    from forgetmap.meter import OptionMeter

    hf_logging.set_verbosity_error()
    spec, base, tokenizer, data, _, _ = demo_setup(workdir, model, task)

    def measuring(net):
        meter = OptionMeter.for_items(net, tokenizer, benchmark, token_budget=16384)

        def measure():
            values = meter.measure()
            return benchmark.decide(values), benchmark.margins(values)
        return measure

    steps, before, rows_at = along_training(spec, base, tokenizer, data, seed, every, measuring)
    return (steps, before[0], np.stack([r[0] for r in rows_at]), before[1], np.stack([r[1] for r in rows_at]))


def check_cost(workdir: Path, model: str, task: str, benchmark, item_map, every: int = 5) -> dict:
    """What watching the items costs inside a transformers Trainer (the demo's fine-tune of `task`, the monitor
    checking every `every` steps, k = 30 through the map): the baseline's and each check's seconds."""
    import time

    import torch
    from transformers import AutoModelForCausalLM, logging as hf_logging

    from forgetmap.monitor import ForgettingMonitor
    from forgetmap.monitor.items import ItemWatch

    hf_logging.set_verbosity_error()
    spec, base, tokenizer, data, _, _ = demo_setup(workdir, model, task)
    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_pretrained(base)
    monitor = ForgettingMonitor(items=ItemWatch(benchmark, item_map), every=every)
    with tempfile.TemporaryDirectory() as out:
        trainer = demo_trainer(net, data, tokenizer, spec, out, 0, eval_steps=None)
        monitor.attach(trainer)
        started = time.perf_counter()
        trainer.train()
        total = time.perf_counter() - started
    seconds = [c["eval_forget_items_seconds"] for c in monitor.checks]
    return {"checks": len(seconds), "check seconds (median)": float(np.median(seconds)),
            "training seconds with the monitor": total}


def estimates(truth, before, options, models: dict, level: float, draws: int, seed: int,
              margins: dict | None = None) -> dict:
    """{estimate: {rate: (estimates, lowers, uppers) over the draws}} at one check. `margins`: {"base": every
    item's margin at step 0, "now": at this check, "choice": the multiple-choice items' positions, "factors": {k:
    the calibrated factors}}: the margins' estimate over the multiple-choice items from each k, on draws of its own."""
    from forgetmap.correctness.forecast import bounded_rates, complete_items, naive_rates
    from forgetmap.correctness.margins import margin_rates

    n = len(truth)
    rng = np.random.default_rng(seed)
    out: dict = {}

    def add(name, found):
        for rate in RATES:
            out.setdefault(name, {}).setdefault(rate, []).append(
                (found[rate].estimate, found[rate].lower, found[rate].upper))

    for _ in range(draws):
        for k in (30, 60, 100):
            known = np.sort(rng.choice(n, k, replace=False))
            values = truth[known].astype(np.float64)
            for name, model in models.items():
                if k == 60 or (k == 100 and name != "irt"):
                    continue
                row, held = complete_items(model, known, values, n)
                add(f"{name}, k={k}", bounded_rates(row, known, values, held, before, options, level))
                if k == 30 and name == next(iter(models)):  # the forecast's weight tuned on the scored items
                    add(f"{name}, k={k}, tuned weight", bounded_rates(row, known, values, held, before, options,
                                                                      level, weight="tuned"))
            add(f"naive, k={k}", naive_rates(values, before[known], options[known], level))
        for k, factors in (margins or {}).get("factors", {}).items():
            choice = margins["choice"]
            known = np.sort(rng.choice(len(choice), k, replace=False))
            values = truth[choice][known].astype(np.float64)
            _, found = margin_rates(margins["base"][choice], known, margins["now"][choice][known], values,
                                    before[choice], options[choice], factors, seed=int(rng.integers(2**31)))
            add(f"margins, k={k} (multiple choice)", found["all"])
    return {name: {rate: np.asarray(v) for rate, v in found.items()} for name, found in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("."))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--level", type=float, default=0.9)
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--methods", nargs="+", default=["additive", "mf", "irt"])
    parser.add_argument("--margin-k", type=int, nargs="*", default=[30, 60, 100],
                        help="the margins' estimate from each of these k (none: not run)")
    parser.add_argument("--cost", action="store_true", help="also time the items' checks inside a Trainer")
    parser.add_argument("--generated", action="store_true",
                        help="every quiz item, the free-form ones answered greedily too (default: multiple choice)")
    parser.add_argument("--truths", type=Path, default=None,
                        help="an .npz of the truths at every check: read where it exists, else written after scoring")
    args = parser.parse_args()

    import torch
    import yaml

    from forgetmap.config import fit_tasks, resolve
    from forgetmap.config.views import forecast_modes
    from forgetmap.models import load_tokenizer
    from forgetmap.correctness.margins import calibration
    from forgetmap.monitor.items import ItemMap
    from forgetmap.predict.registry import make_method

    torch.set_num_threads(2)
    workdir = args.workdir.resolve()
    cfg = resolve(yaml.safe_load((workdir / "config/config.yaml").read_text()))
    tokenizer = load_tokenizer(workdir / f"results/{args.model}/base")
    benchmark = quiz(workdir, args.model, tokenizer, args.generated)
    fits = fit_tasks(cfg, args.model)
    item_map = ItemMap.from_transitions(workdir / f"results/{args.model}/correctness/transitions.parquet", fits,
                                        scores=workdir / f"results/{args.model}/scores")
    train = item_map.train[:, item_map.columns_of(benchmark.ids, "the demo's quiz")]
    models = {name: make_method(name).fit(train) for name in args.methods}
    tasks = sorted(t for t, mode in forecast_modes(cfg, args.model).items() if mode == "check")
    if args.truths is not None and args.truths.exists():
        stored = np.load(args.truths, allow_pickle=True)
        runs = stored["runs"].item()
    else:
        runs = {}
        for task in tasks:
            for seed in range(args.seeds):
                runs[(task, seed)] = truths(workdir, args.model, task, seed, args.every, benchmark)
                print(f"scored {task} seed {seed}", file=sys.stderr, flush=True)
        if args.truths is not None:
            np.savez(args.truths, runs=np.array(runs, dtype=object))
    print(f"{len(benchmark)} quiz items, {len(benchmark.generated)} of them free form ({len(item_map.rows)} map rows: the fit tasks), "
          f"{len(runs)} runs, checks every {args.every} steps, {args.draws} draws per check, level {args.level}\n")
    options = benchmark.options
    choice = np.flatnonzero(options > 0)
    columns = item_map.columns_of(benchmark.ids, "the demo's quiz")[choice]
    errors: dict = {}
    factors = {}
    together = [np.corrcoef(base[choice], now[choice])[0, 1] for _, _, _, base, at in runs.values() for now in at]
    print(f"the margins at a check against step 0's, correlation over the multiple-choice items: "
          f"{min(together):.2f}-{max(together):.2f}")
    if args.margin_k:  # every run's step 0 is the same base: its margins and correctness calibrate the interval
        _, base_before, _, base_margins, _ = next(iter(runs.values()))
        for k in args.margin_k:
            factors[k] = calibration(base_margins[choice], base_before[choice].astype(np.float64),
                                     item_map.margins[:, columns], item_map.train[:, columns], k, args.level)
            print(f"the margins' interval factors from {k} items (acc, F, BT): "
                  + ", ".join(f"{factors[k][r]:.2f}" for r in RATES))
    sizes, sizes_choice = {rate: [] for rate in RATES}, {rate: [] for rate in RATES}
    trajectory = []
    for (task, seed), (steps, before, after, base_margins, margins_at) in runs.items():
        before = before.astype(np.float64)
        for step, truth, now in zip(steps, after, margins_at):
            true = {"acc": truth.mean(), "F": np.mean(before * (1 - truth)), "BT": np.mean((1 - before) * truth)}
            true_choice = {"acc": truth[choice].mean(), "F": np.mean(before[choice] * (1 - truth[choice])),
                           "BT": np.mean((1 - before[choice]) * truth[choice])}
            for rate in RATES:
                sizes[rate].append(true[rate])
                sizes_choice[rate].append(true_choice[rate])
            found = estimates(truth, before, options, models, args.level, args.draws, seed * 1000 + step,
                              {"base": base_margins, "now": now, "choice": choice, "factors": factors})
            for name, per_rate in found.items():
                reference = true_choice if name.startswith("margins") else true
                for rate, values in per_rate.items():
                    error = np.abs(values[:, 0] - reference[rate])
                    covered = (values[:, 1] <= reference[rate]) & (reference[rate] <= values[:, 2])
                    errors.setdefault(name, {}).setdefault(rate, []).append((error, covered))
            if seed == 0:
                main_method = f"{args.methods[0]}, k=30"
                trajectory.append({"task": task, "step": step, "true F": true["F"],
                                   "forecast F": float(np.mean(found[main_method]["F"][:, 0])),
                                   "naive F": float(np.mean(found["naive, k=30"]["F"][:, 0])),
                                   "true acc": true["acc"], "forecast acc": float(np.mean(found[main_method]["acc"][:, 0]))})
    print("truth: mean accuracy {:.3f}, F {:.3f}, BT {:.3f} (over every check); over the {} multiple-choice items "
          "(the margins'): {:.3f}, {:.3f}, {:.3f}\n".format(*(np.mean(sizes[r]) for r in RATES), len(choice),
                                                           *(np.mean(sizes_choice[r]) for r in RATES)))
    lines = []
    for name, per_rate in errors.items():
        line = {"estimate": name}
        for rate in RATES:
            error = np.concatenate([e for e, _ in per_rate[rate]])
            covered = np.concatenate([c for _, c in per_rate[rate]])
            line[f"{rate} error"] = error.mean()
            line[f"{rate} coverage"] = covered.mean()
        lines.append(line)
    print(pd.DataFrame(lines).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"\nF error of the map's forecast over F's mean size: "
          f"{lines[0]['F error'] / np.mean(sizes['F']):.3f} ({lines[0]['estimate']})\n")
    frame = pd.DataFrame(trajectory)
    print(frame.groupby("step")[["true F", "forecast F", "naive F", "true acc", "forecast acc"]].mean().to_string(
        float_format=lambda v: f"{v:.4f}"))
    if args.cost:
        print(f"\nwatching the items inside a Trainer ({tasks[0]}): {check_cost(workdir, args.model, tasks[0], benchmark, item_map)}")
        if args.generated:  # side by side: the multiple-choice items alone
            options_only = quiz(workdir, args.model, tokenizer)
            print(f"the multiple-choice items alone: {check_cost(workdir, args.model, tasks[0], options_only, item_map)}")
    one = frame[frame["task"] == frame["task"].iloc[0]]
    print(f"\n{one['task'].iloc[0]}, seed 0:\n" + one.drop(columns="task").to_string(index=False,
                                                                                    float_format=lambda v: f"{v:.4f}"))


if __name__ == "__main__":
    main()
