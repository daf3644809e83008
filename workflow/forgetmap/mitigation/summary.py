"""Which arm forgets least, by how much, and whether that is significant (one table, tests, figures).

Per (arm, task, seed): `heldout_forgetting` = mean ΔNLL over the held-out examples (arm NLL minus the
matrix's base NLL); `reduction` = 1 - F_arm / F_none at the same task and seed (NaN where F_none <= 0: plain fine-tuning
forgot nothing to reduce); `forgetting_on_forgotten`
= mean ΔNLL over the held-out examples that plain fine-tuning forgot (forgetmap.matrix.forgotten);
`target_nll` = the task's validation NLL; `tokens`, `seconds` of training; `replayed`, `masked_share`;
`reduction_per_extra_ktoken` = (F_none - F_arm) per 1,000 tokens trained beyond plain fine-tuning.
Where upstream items carry an answer (forgetmap.transitions): `heldout_items`, the held-out items;
`heldout_F` = n10 / N and `heldout_BT` = n01 / N over them (Harmon et al.'s sample-wise rates, the base
model's correctness from the transitions matrix, the same margin filter).

Tests (forgetmap.mitigation.stats) pair each arm's held-out forgetting (and, with items, its heldout_F)
with `none`'s, and each replay arm's with the `random` replay arm of the same ratio (the same budget),
over (task, seed) pairs; the `statistic` column says which.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataError
from ..matrix import ForgettingMatrix, forgotten
from ..stats import paired_test, rate_differences

NO_ARM = "none"


def heldout_transitions(scores: str, before: pd.Series, margin: float | None) -> dict:
    """heldout_items, heldout_F, heldout_BT of one arm's held-out scores; `before`: the base model's
    correctness (0 / 1) by example id of every item."""
    import pyarrow.parquet as pq

    from ..correctness.transitions import known

    if "correct" not in pq.read_schema(scores).names:
        raise DataError(f"{scores}: no column 'correct': the arm was scored before correctness was; rescore it")
    table = pd.read_parquet(scores, columns=["example_id", "correct", "margin", "k"])
    after = known(table["correct"].to_numpy(np.float64), table["k"].to_numpy(np.float64),
                  table["margin"].to_numpy(np.float64), margin)
    base = before.reindex(table["example_id"]).to_numpy(np.float64)
    items = np.isfinite(base) & np.isfinite(after)
    if not items.any():
        return {"heldout_items": 0, "heldout_F": np.nan, "heldout_BT": np.nan, "heldout_n10": 0, "heldout_n01": 0}
    base, after = base[items], after[items]
    n10, n01 = int(np.sum((base == 1) & (after == 0))), int(np.sum((base == 0) & (after == 1)))
    return {"heldout_items": int(items.sum()), "heldout_F": n10 / int(items.sum()),
            "heldout_BT": n01 / int(items.sum()), "heldout_n10": n10, "heldout_n01": n01}


def per_run(matrix: ForgettingMatrix, runs: list[dict], threshold: float = 0.0,
            transitions: ForgettingMatrix | None = None, margin: float | None = None) -> pd.DataFrame:
    """One row per run (see the module docstring); `transitions` (the codes matrix) adds the held-out
    items' sample-wise rates."""
    base = pd.Series(matrix.base_nll.astype(np.float64), index=matrix.example_ids)
    before = None if transitions is None else pd.Series(transitions.values[0] // 2, index=transitions.example_ids)
    deltas, rows = {}, []
    for run in runs:
        scores = pd.read_parquet(run["scores"], columns=["example_id", "nll"])
        delta = scores["nll"].to_numpy(np.float64) - base.reindex(scores["example_id"]).to_numpy()
        deltas[(run["arm"], run["seed"], run["task"])] = delta
        facts = json.loads(Path(run["scores"]).with_suffix(".json").read_text())
        rows.append({"arm": run["arm"], "task": run["task"], "seed": run["seed"],
                     "heldout_forgetting": float(np.nanmean(delta)), "target_nll": facts["validation_nll"],
                     "tokens": facts["tokens"], "seconds": facts["seconds"], "replayed": facts.get("replayed") or 0,
                     "masked_share": facts.get("masked_share") or 0.0,
                     **({} if before is None else heldout_transitions(run["scores"], before, margin))})
    frame = pd.DataFrame(rows)
    none = frame[frame["arm"] == NO_ARM].set_index(["task", "seed"])
    f_none = none["heldout_forgetting"].reindex(pd.MultiIndex.from_frame(frame[["task", "seed"]])).to_numpy()
    tokens_none = none["tokens"].reindex(pd.MultiIndex.from_frame(frame[["task", "seed"]])).to_numpy()
    # a share of plain fine-tuning's forgetting: meaningless where that forgot nothing (F_none <= 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["reduction"] = np.where(f_none > 0, 1 - frame["heldout_forgetting"] / f_none, np.nan)
    extra = (frame["tokens"] - tokens_none).to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        frame["reduction_per_extra_ktoken"] = np.where(extra > 0, (f_none - frame["heldout_forgetting"]) / extra * 1e3,
                                                       np.nan)
    on_forgotten = []
    for (arm, seed, task), delta in deltas.items():
        mask = forgotten(deltas[(NO_ARM, seed, task)], threshold)
        on_forgotten.append(float(np.nanmean(delta[mask])) if mask.any() else np.nan)
    frame["forgetting_on_forgotten"] = on_forgotten
    columns = ["arm", "task", "seed", "heldout_forgetting", "reduction", "forgetting_on_forgotten", "target_nll",
               "tokens", "seconds", "replayed", "masked_share", "reduction_per_extra_ktoken"]
    return frame[columns + [c for c in ("heldout_items", "heldout_F", "heldout_BT", "heldout_n10", "heldout_n01")
                            if c in frame]]


def comparisons(arms: dict[str, dict]) -> list[tuple[str, str]]:
    """(arm, baseline) pairs: every arm against none; a replay arm also against random replay at its ratio."""
    pairs = [(arm, NO_ARM) for arm in arms if arm != NO_ARM]
    randoms = {spec["ratio"]: arm for arm, spec in arms.items() if spec["replay"] == "random"}
    for arm, spec in arms.items():
        if spec["replay"] not in ("none", "random") and spec["ratio"] in randoms:
            pairs.append((arm, randoms[spec["ratio"]]))
    return pairs


def paired_tests(frame: pd.DataFrame, arms: dict[str, dict], level: float) -> pd.DataFrame:
    """Every comparison on the held-out forgetting, and on heldout_F where the runs scored items."""
    items = "heldout_items" in frame and (frame["heldout_items"] > 0).any()
    statistics = ["heldout_forgetting", "heldout_F"] if items else ["heldout_forgetting"]
    rows = []
    for statistic in statistics:
        wide = frame.pivot_table(index=["task", "seed"], columns="arm", values=statistic, dropna=False)
        counts = items and statistic == "heldout_F"  # a rate of counts: its differences are taken exactly
        if counts:
            n10 = frame.pivot_table(index=["task", "seed"], columns="arm", values="heldout_n10", dropna=False)
            n = frame.pivot_table(index=["task", "seed"], columns="arm", values="heldout_items", dropna=False)
        for arm, baseline in comparisons(arms):
            exact = rate_differences(n10[arm].to_numpy(), n[arm].to_numpy(), n10[baseline].to_numpy(),
                                     n[baseline].to_numpy()) if counts else None
            result = paired_test(wide[arm].to_numpy(), wide[baseline].to_numpy(),
                                 wide.index.get_level_values("task").to_numpy(), level, d=exact)
            rows.append({"statistic": statistic, "arm": arm, "baseline": baseline, **result})
    return pd.DataFrame(rows)


def summary_command(matrix: str, settings: dict, summary: str, tests: str, forgetting_figure: str,
                    paired_figure: str, tradeoff_figure: str, per_token_figure: str,
                    transitions: str | None = None) -> dict:
    """`forgetmap mitigation-summary`."""
    from .. import plots
    from ..io import atomic_path

    codes = None if transitions is None else ForgettingMatrix.read(transitions)
    frame = per_run(ForgettingMatrix.read(matrix), settings["runs"], settings["threshold"], codes,
                    settings["margin"])
    arms = {arm["name"]: arm for arm in settings["arms"]}
    table = paired_tests(frame, arms, settings["level"])
    for data, path in ((frame, summary), (table, tests)):
        with atomic_path(path) as tmp:
            data.to_csv(tmp, sep="\t", index=False, float_format="%.6g")
    plots.mitigation_forgetting(frame, table, forgetting_figure)
    plots.mitigation_paired(frame, comparisons(arms), paired_figure)
    plots.mitigation_tradeoff(frame, tradeoff_figure)
    plots.mitigation_per_token(frame, per_token_figure)
    means = frame.groupby("arm", sort=False)["heldout_forgetting"].mean()
    result = {"runs": len(frame), **{f"forgetting_{arm}": round(float(v), 5) for arm, v in means.items()}}
    if "heldout_F" in frame:
        rates = frame.groupby("arm", sort=False)["heldout_F"].mean()
        result.update({f"F_{arm}": round(float(v), 4) for arm, v in rates.items()})
    return result
