"""What the map saves: a new checkpoint's forgetting (F) and backward transfer (BT) forecast from k scored
items, against its full sampled evaluation, and the generated tokens it did not need.

Leave one row of a finished map out (each in turn): its reference's full row and the other rows are
known; k of its items are scored (random, 10 draws); its row of seed-mean correctness is completed by a
method fitted on the other rows (`forgetmap.correctness.forecast`) and its rates read off. `direct` is
the same k items without the map. The truth is Harmon's measurement: the mean over seeds of each seed's
paired rates. Tokens: those the row's full evaluation generated (every item, every seed) against those of
its k items.

    snakemake --cores 2 && snakemake --cores 2 --configfile config/examples/demo-map.yaml
    python benchmarks/posttraining_forecast.py --workdir . --model demo_map
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd


def read_map(workdir: Path, model: str):
    """(rows, before (S, N), after (rows, S, N), tokens (rows, N)) of the map's items, from its score files."""
    scores = workdir / "results" / model / "scores"
    rows = sorted(p.name for p in scores.iterdir() if p.name != "base")

    def run(name):
        frame = pd.concat([pd.read_parquet(p) for p in sorted((scores / name).glob("shard-*.parquet"),
                                                               key=lambda p: int(p.stem.split("-")[1]))])
        frame = frame[frame["correct"].notna()]
        return np.array(frame["correct_seeds"].tolist(), dtype=np.float64).T, frame["n_generated"].to_numpy()

    before, _ = run("base")
    after, tokens = zip(*(run(r) for r in rows))
    return rows, before, np.stack(after), np.stack(tokens)


def main() -> None:
    from forgetmap.correctness.forecast import direct_rates, forecast_rates
    from forgetmap.correctness.transitions import rates as paired_rates

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default=".")
    parser.add_argument("--model", default="demo_map")
    parser.add_argument("--ks", type=int, nargs="+", default=[10, 20, 30, 50])
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--methods", nargs="+", default=["additive", "knn", "mf"])
    args = parser.parse_args()

    rows, before, after, tokens = read_map(Path(args.workdir), args.model)
    n_seeds, n_items = before.shape
    truth = np.array([[np.mean([paired_rates(before[s], after[r, s], np.zeros(n_items))[key]
                                for s in range(n_seeds)]) for key in ("F", "BT")] for r in range(len(rows))])
    mean_before, mean_after = before.mean(axis=0), after.mean(axis=1)  # seed means
    records = []
    for k in args.ks:
        for r in range(len(rows)):
            train = np.delete(mean_after, r, axis=0)
            known = np.stack([np.sort(np.random.default_rng(1000 * k + d).choice(n_items, k, replace=False))
                              for d in range(args.draws)])
            values = mean_after[r][known]
            estimates = {"direct": direct_rates(mean_before, np.repeat(mean_after[r][None], args.draws, 0), known)}
            for method in args.methods:
                estimates[method] = forecast_rates(train, mean_before, known, values, method)
            saved = tokens[r].sum() / np.array([tokens[r][c].sum() for c in known])
            for name, estimate in estimates.items():
                error = np.abs(estimate - truth[r])
                records.append({"k": k, "method": name, "row": rows[r], "F_abs_error": error[:, 0].mean(),
                                "BT_abs_error": error[:, 1].mean(), "tokens_saved": float(np.median(saved))})
    table = pd.DataFrame(records)
    summary = table.groupby(["k", "method"], sort=False).agg(
        F_mae=("F_abs_error", "mean"), BT_mae=("BT_abs_error", "mean"), tokens_saved=("tokens_saved", "median"))
    print(f"{args.model}: {len(rows)} rows, {n_items} items, {n_seeds} seeds; measured F {truth[:, 0].min():.3f}"
          f"-{truth[:, 0].max():.3f} (mean {truth[:, 0].mean():.3f}), BT {truth[:, 1].mean():.4f}")
    print(summary.round(4).to_string())


if __name__ == "__main__":
    main()
