"""The bound a forgetting budget acts on, measured against the truth at every check (docs/monitor.md; BENCHMARKS.md).

After the demo: each of its `check` tasks is fine-tuned as the demo fine-tunes it (a transformers `Trainer`, the
demo's steps, batch and rate; `--seeds` seeds of the task's order), and at every `--every` steps the whole upstream
set is scored, so the mean forgetting of the weights at that check is known. Then, at each check, for `--draws`
draws of the `--audit` examples (without replacement, from the examples that are not probes), the bounds on that
mean at `--level`:

- the run's own (forgetmap.predict.bound): the forecast from the map's k D-optimal probes, corrected by the audit
  examples' residuals (the forecast's weight 1), the audit drawn as the map draws it, by two strata of the fit rows
  (forgetmap.predict.audit; each draw with its own seed), Student's t's half-width scaled to the ends the map's fit
  tasks place the truth at (forgetmap.predict.ends: what the monitor logs); beside it, Hall's transformation of t
  at each stratum's skewness of the map's leave-one-task-out residuals (what the monitor logged before);
- the same from an audit drawn uniformly, Hall's at the residuals' skewness over every example (the monitor's
  before the strata), and with Student's t (before that);
- the same with the forecast's weight tuned on the uniform audit examples (`weight="tuned"`, PPI++);
- the map's constant (what the monitor used before): the forecast's mean ± the half-width of the map's
  leave-one-fit-task-out folds, the same at every check;
- the naive monitor's: the k probes' measured mean with a t-interval (not a random sample: the D-optimal probes);
- a random sample's: the uniform audit examples' own mean with a t-interval (no map);

and the run's own bound on the share of examples forgotten by more than each of `--shares` nats per token.

Printed: per bound, coverage (the interval holds the truth; its upper end at or above it) and mean half-width, over
every task, seed, check and draw; then what a budget does at `--budgets` with `--patience`: runs stopped, runs
stopped whose true mean never exceeded the budget `patience` checks in a row, runs let finish whose true mean did.

    python benchmarks/monitor_bound.py --workdir . --seeds 3 --truths truths.npz   # after the demo (6 min on 2 cores)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hall import hall_bound, map_skew  # noqa: E402
from monitor import along_training, demo_setup  # noqa: E402


def truths(workdir: Path, model: str, task: str, seed: int, every: int) -> tuple[list[int], np.ndarray, object]:
    """(the check steps, Z at each check over the map's usable examples (checks x U), the map): the whole upstream
    set scored at every `every` steps of the check task's fine-tune."""
    from transformers import logging as hf_logging

    from forgetmap.data.chat import encode_examples
    from forgetmap.data.upstream import read_ids, read_rows
    from forgetmap.nll import TorchScorer

    hf_logging.set_verbosity_error()
    spec, base, tokenizer, data, shards, forecast_map = demo_setup(workdir, model, task)
    files = [str(s) for s in shards]
    position = {e: i for i, e in enumerate(read_ids(files))}
    rows = read_rows(files, np.array([position[e] for e in forecast_map.example_ids]))
    encoded = encode_examples(tokenizer, rows, spec["chat_template"], spec["score"]["max_length"])

    def measuring(net):
        def scored() -> np.ndarray:
            training = net.training
            net.eval()
            nll, _ = TorchScorer(net, tokenizer.pad_token_id, inference=False).score(encoded)
            net.train(training)
            return np.asarray(nll, np.float64)
        return scored

    steps, before, rows_at = along_training(spec, base, tokenizer, data, seed, every, measuring)
    return steps, np.stack(rows_at) - before, forecast_map


def bounds(truth: np.ndarray, forecast_map, level: float, audit: int, draws: int, seed: int,
           shares: tuple = ()) -> dict:
    """Each bound's intervals at one check: {name: (lower, upper) arrays over the draws}; `shares`: also the run's
    own bound on the share of examples forgotten by more than each."""
    from forgetmap.predict.audit import audit_draw, two_strata
    from forgetmap.predict.bound import mean_bound, sample_interval, share_bound

    known = forecast_map.known
    row, _ = forecast_map.forecast(truth[known])
    constant = forecast_map.mean_halfwidth(level)
    rest = np.setdiff1d(np.arange(len(truth)), known)
    rng = np.random.default_rng(seed)
    out = {"run's own": [], "run's own, Hall's (before)": [], "run's own, uniform": [], "run's own, uniform, t": [],
           "tuned weight": [], "a random sample's": []}
    skew = map_skew(forecast_map)  # one per stratum (what the monitor took)
    whole = map_skew(forecast_map, strata=False)  # over every hidden example (the monitor's before the strata)
    by_strata = [audit_draw(forecast_map.train, known, audit, seed * draws + d) for d in range(draws)]  # the map's
    calibrated = dataclasses.replace(forecast_map, audit=by_strata[0][0], strata=two_strata(by_strata[0][1]), _ends={})
    ends = calibrated.bound_ends(level)  # the map's ends for audits of this size and strata (what the monitor takes)
    for drawn, strata in by_strata:
        labels = two_strata(strata)
        own = mean_bound(row, known, truth[known], drawn, truth[drawn], level, ends=ends, strata=labels)
        out["run's own"].append((own.lower, own.upper))
        hall = hall_bound(row, known, truth[known], drawn, truth[drawn], level, skew if labels is not None
                          else whole, strata=labels)
        out["run's own, Hall's (before)"].append((hall.lower, hall.upper))
        drawn = np.sort(rng.choice(rest, audit, replace=False))  # uniformly
        uniform = hall_bound(row, known, truth[known], drawn, truth[drawn], level, whole)
        plain = mean_bound(row, known, truth[known], drawn, truth[drawn], level)
        tuned = mean_bound(row, known, truth[known], drawn, truth[drawn], level, weight="tuned")
        sample = sample_interval(truth[drawn], level)
        out["run's own, uniform"].append((uniform.lower, uniform.upper))
        out["run's own, uniform, t"].append((plain.lower, plain.upper))
        out["tuned weight"].append((tuned.lower, tuned.upper))
        out["a random sample's"].append((sample.lower, sample.upper))
    for over in shares:  # the share forgotten by more than `over`, bounded the same way
        out[f"share over {over:g}"] = []
    for drawn, strata in by_strata:  # the same stratified draws again, for the shares
        for over in shares:
            found = share_bound(row, known, truth[known], drawn, truth[drawn], over, level, strata=two_strata(strata))
            out[f"share over {over:g}"].append((found.lower, found.upper))
    naive = sample_interval(truth[known], level)
    mean = float(np.mean(row))
    out["the map's constant"] = [(mean - constant, mean + constant)] * draws
    out["the naive monitor's"] = [(naive.lower, naive.upper)] * draws
    return {name: np.asarray(v) for name, v in out.items()}


def stop_step(over: list[bool], steps: list[int], patience: int) -> int | None:
    run = 0
    for step, flag in zip(steps, over):
        run = run + 1 if flag else 0
        if run >= patience:
            return step
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("."))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--level", type=float, default=0.9)
    parser.add_argument("--audit", type=int, default=30)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.05, 0.1, 0.15, 0.2])
    parser.add_argument("--patience", type=int, default=2)
    parser.add_argument("--shares", type=float, nargs="*", default=[0.2, 0.5],
                        help="also bound the share of examples forgotten by more than each (nats per token)")
    parser.add_argument("--truths", type=Path, default=None,
                        help="an .npz of the truths at every check: read where it exists, else written after scoring")
    args = parser.parse_args()
    import torch
    import yaml

    from forgetmap.config import forecast_modes, resolve

    torch.set_num_threads(1)
    cfg = resolve(yaml.safe_load((args.workdir / "config/config.yaml").read_text()))
    tasks = sorted(t for t, mode in forecast_modes(cfg, args.model).items() if mode == "check")
    runs = []
    if args.truths is not None and args.truths.exists():
        saved = np.load(args.truths)
        forecast_map = demo_setup(args.workdir, args.model, tasks[0])[-1]
        runs = [{"task": str(task), "seed": int(seed), "steps": saved["steps"].tolist(), "truth": truth}
                for task, seed, truth in zip(saved["tasks"], saved["seeds"], saved["truths"])]
    for task in tasks if not runs else ():
        for seed in range(args.seeds):
            steps, truth, forecast_map = truths(args.workdir, args.model, task, seed, args.every)
            runs.append({"task": task, "seed": seed, "steps": steps, "truth": truth})
            print(f"{task} seed {seed}: true mean at steps {steps}: {np.round(truth.mean(axis=1), 4).tolist()}",
                  flush=True)
    if args.truths is not None and not args.truths.exists():
        np.savez(args.truths, tasks=[r["task"] for r in runs], seeds=[r["seed"] for r in runs],
                 steps=runs[0]["steps"], truths=np.stack([r["truth"] for r in runs]))
    records, decisions = [], []
    for run in runs:
        per_check = [bounds(z, forecast_map, args.level, args.audit, args.draws, 1000 * run["seed"] + c,
                            tuple(args.shares)) for c, z in enumerate(run["truth"])]
        means = run["truth"].mean(axis=1)
        for c, found in enumerate(per_check):
            for name, intervals in found.items():
                truth = float(np.mean(run["truth"][c] > float(name.split()[-1]))) if name.startswith("share") \
                    else means[c]
                records.append({"bound": name, "task": run["task"], "seed": run["seed"], "step": run["steps"][c],
                                "truth": truth,
                                "covered": float(np.mean((intervals[:, 0] <= truth) & (truth <= intervals[:, 1]))),
                                "upper_holds": float(np.mean(truth <= intervals[:, 1])),
                                "halfwidth": float(np.mean(intervals[:, 1] - intervals[:, 0]) / 2)})
            per_check[c] = {k: v for k, v in found.items() if not k.startswith("share")}
        for budget in args.budgets:
            truly = stop_step([m > budget for m in means], run["steps"], args.patience)
            for name in per_check[0]:
                stops = [stop_step([found[name][d, 1] > budget for found in per_check], run["steps"], args.patience)
                         for d in range(args.draws)]
                decisions.append({"bound": name, "budget": budget, "task": run["task"], "seed": run["seed"],
                                  "stopped": float(np.mean([s is not None for s in stops])),
                                  "stopped_wrongly": float(np.mean([s is not None and truly is None for s in stops])),
                                  "let_finish_wrongly": float(np.mean([s is None and truly is not None for s in stops])),
                                  "truth_stops": truly is not None})
    table = pd.DataFrame(records)
    pd.set_option("display.width", 160)
    print(f"\ncoverage at level {args.level} and half-width, over {len(runs)} runs ({len(tasks)} tasks) x "
          f"{len(runs[0]['steps'])} checks x {args.draws} draws (truth: the mean, or the share):")
    print(table.groupby("bound")[["covered", "upper_holds", "halfwidth", "truth"]].mean()
          .to_string(float_format=lambda v: f"{v:.3f}"))
    print("\nby check step (the run's own bound):")
    own = table[table["bound"] == "run's own"]
    print(own.groupby("step")[["covered", "upper_holds", "halfwidth"]].mean().to_string(float_format=lambda v: f"{v:.3f}"))
    print("\nby task (the run's own bound):")
    print(own.groupby("task")[["covered", "upper_holds", "halfwidth"]].mean().to_string(float_format=lambda v: f"{v:.3f}"))
    print("\nby run, mean half-width over its checks and draws and coverage (the run's own, weight 1, and with the "
          "weight tuned, against a random sample's):")
    chosen = table[table["bound"].isin(["run's own", "run's own, uniform", "tuned weight", "a random sample's"])]
    widths = chosen.pivot_table(index=["task", "seed"], columns="bound", values="halfwidth", aggfunc="mean")
    widths["own / sample"] = widths["run's own"] / widths["a random sample's"]
    widths["own, uniform / sample"] = widths["run's own, uniform"] / widths["a random sample's"]
    widths["tuned / sample"] = widths["tuned weight"] / widths["a random sample's"]
    covered = chosen.pivot_table(index=["task", "seed"], columns="bound", values="covered", aggfunc="mean")
    widths = widths.join(covered.add_prefix("covered: "))
    print(widths.to_string(float_format=lambda v: f"{v:.3f}"))
    decided = pd.DataFrame(decisions)
    print(f"\na budget with patience {args.patience} (share of runs, each run averaged over the draws):")
    print(decided.groupby(["budget", "bound"])[["stopped", "stopped_wrongly", "let_finish_wrongly", "truth_stops"]]
          .mean().to_string(float_format=lambda v: f"{v:.3f}"))
    print(json.dumps({"true_means": {f"{r['task']}/{r['seed']}": np.round(r["truth"].mean(axis=1), 4).tolist()
                                     for r in runs}}))


if __name__ == "__main__":
    main()
