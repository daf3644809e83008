"""What a forecast through another model's map costs (docs/monitor.md, "whose map"; BENCHMARKS.md).

Two forgetting matrices over the same upstream examples and tasks: the demo base's, and another model's, each with
the demo's `check` tasks among its measured rows. For each check task of the other model, its row is forecast from
k D-optimal probes' values measured on that model, two ways: through its own map (its fit rows, the probes chosen on
them) and through the base's map (the base's fit rows and probes: a user monitoring another model with the base's
map). Each forecast is scored against the other model's measured row over the examples that are not probes: RMSE,
Spearman's rank correlation, top-10 % F1, and the coverage of the 90 % per-example intervals.

The other models, made after the demo (`--workdir`):
- a sibling: the demo's base pretrained from another seed (`models.demo.base.seed`), in a copy of the workdir:
  `snakemake --cores 2 results/demo/forgetting.parquet --config ...` (the commands below);
- a descendant: the demo's base fine-tuned on a mixture of three measured tasks (`--descendant DIR` writes it),
  then mapped as a pretrained base (`models.demo.base: {kind: pretrained, path: DIR}`) in another copy.

    python benchmarks/another_map.py --workdir . --descendant ../descendant-model          # writes the model
    python benchmarks/another_map.py --workdir . --other ../sibling/results/demo/forgetting.parquet
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

MIXTURE = ("add_qa", "reverse_qa", "city_qa")  # measured tasks of three categories, none a check task


def descendant(workdir: Path, model: str, out: Path) -> dict:
    """The demo's base fine-tuned on a mixture of MIXTURE's training rows, as the demo fine-tunes (its settings)."""
    import tempfile

    import yaml

    from forgetmap.plan import Plan
    from forgetmap.train import finetune

    cfg = yaml.safe_load((workdir / "config/config.yaml").read_text())
    settings = dict(Plan(cfg).finetune_settings(model, MIXTURE[0]))
    settings.pop("monitor", None)
    mixture = pd.concat([pd.read_parquet(min(workdir.glob(f"results/data/tasks/{t}.*.parquet"))) for t in MIXTURE],
                        ignore_index=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mixture.parquet"
        mixture.to_parquet(path)
        return finetune(str(workdir / f"results/{model}/base"), str(path), settings, 2, str(out))


def forecast(matrix, fit: list[str], task_row: np.ndarray, k: int, level: float):
    """(forecast over the map's usable examples, its half-widths, the usable indices, the probes' positions) of
    `task_row` (a row over the corpus) through the map `matrix` x `fit` makes."""
    from forgetmap.predict.forecast import choose, complete, fit_rows

    train, usable = fit_rows(matrix, fit, "map")
    known = choose(train, k, "dopt", 0, "map")
    values = task_row[usable[known]].astype(np.float32)[None, :]
    pred, widths = complete(train, known, values, "mf", {}, [level])
    return pred[0], widths[level], usable, known


def scored(pred, width, usable, known, truth_row) -> dict:
    from scipy.stats import spearmanr

    from forgetmap.predict.metrics import evaluate

    hidden = np.ones(len(usable), dtype=bool)
    hidden[known] = False
    truth = truth_row[usable]
    hidden &= np.isfinite(truth)
    found = evaluate(pred[None, :], truth[None, :], hidden[None, :])
    return {"rmse": found["rmse"], "spearman": float(spearmanr(pred[hidden], truth[hidden]).statistic),
            "top10_f1": found["top_q_f1"], "coverage_0.9": float(np.mean(np.abs(truth - pred)[hidden] <= width[hidden]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("."))
    parser.add_argument("--model", default="demo")
    parser.add_argument("--other", type=Path, help="the other model's forgetting.parquet")
    parser.add_argument("--descendant", type=Path, help="write the descendant model here and stop")
    parser.add_argument("--level", type=float, default=0.9)
    args = parser.parse_args()
    import torch
    import yaml

    from forgetmap.config import fit_tasks, forecast_modes, resolve
    from forgetmap.matrix import ForgettingMatrix

    torch.set_num_threads(2)
    if args.descendant is not None:
        print(json.dumps({k: v for k, v in descendant(args.workdir, args.model, args.descendant).items()
                          if k in ("steps", "final_loss", "examples", "seconds")}))
        return
    cfg = resolve(yaml.safe_load((args.workdir / "config/config.yaml").read_text()))
    fit = fit_tasks(cfg, args.model)
    checks = sorted(t for t, mode in forecast_modes(cfg, args.model).items() if mode == "check")
    base = ForgettingMatrix.read(args.workdir / f"results/{args.model}/forgetting.parquet")
    other = ForgettingMatrix.read(args.other)
    if not np.array_equal(base.example_ids, other.example_ids):
        raise SystemExit("the two matrices hold other examples")
    k = cfg["forecast"]["k"]
    rows = []
    for task in checks:
        truth = other.row(task).astype(np.float64)
        agreement = float(np.corrcoef(base.row(task)[np.isfinite(truth)], truth[np.isfinite(truth)])[0, 1])
        for name, matrix in (("its own map", other), ("the base's map", base)):
            rows.append({"task": task, "map": name, "row_correlation_with_base": agreement,
                         **scored(*forecast(matrix, fit, truth, k, args.level), truth)})
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 160)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("\nmean over the check tasks:")
    print(table.groupby("map")[["rmse", "spearman", "top10_f1", "coverage_0.9", "row_correlation_with_base"]].mean()
          .to_string(float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
