"""Which arm forgets least, by how much, whether that is significant, at what learning and what cost.

`summary.tsv` has a row per variant: (arm, knob value, α, task, seed), `label` naming the fine-tune (the
arm, or "arm knob=value" in a sweep), `alpha` 1 for the fine-tune as trained and below 1 for its
interpolations toward the base; the learning (`target_nll`), the cheap signals (forgetmap.mitigation.signals)
and the costs (`forward_tokens`, `backward_tokens`, `generated_tokens`, `peak_memory_mb`) beside:
Per (arm, task, seed): `heldout_forgetting` = mean ΔNLL over the held-out examples (arm NLL minus the
matrix's base NLL); `reduction` = 1 - F_arm / F_none at the same task and seed (NaN where F_none <= 0: plain fine-tuning
forgot nothing to reduce); `forgetting_on_forgotten`
= mean ΔNLL over the held-out examples that plain fine-tuning forgot (forgetmap.matrix.forgotten);
`target_nll` = the task's validation NLL; `tokens`, `seconds` of training; `replayed`, `masked_share`;
`reduction_per_extra_ktoken` = (F_none - F_arm) per 1,000 tokens trained beyond plain fine-tuning.
Where upstream items carry an answer (forgetmap.transitions): `heldout_items`, the held-out items;
`heldout_F` = n10 / N and `heldout_BT` = n01 / N over them (Harmon et al.'s sample-wise rates, the base
model's correctness from the transitions matrix, the same margin filter).

Tests (forgetmap.stats) pair each fine-tune's held-out forgetting as trained (and, with items, its
heldout_F) with `none`'s, and each replay arm's with the `random` replay arm of the same ratio (the same
budget), over (task, seed) pairs; each arm's forgetting at plain fine-tuning's learning (its front,
forgetmap.mitigation.fronts) with plain fine-tuning's; and each fine-tune's forgetting with plain
fine-tuning's interpolation front at the same learning; the `statistic` column says which. `fronts.tsv`
has every point's means and Pareto membership, `costs.tsv` every fine-tune's costs against plain
fine-tuning's, `predictors.tsv` each cheap signal's R² for the held-out forgetting (and F) across the
fine-tunes as trained, `protection.tsv` which examples each fine-tune protected against the examples the
task was predicted to forget (forgetmap.mitigation.protection).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..matrix import ForgettingMatrix, forgotten
from ..stats import paired_test, rate_differences
from .evaluate import read_variants
from .signals import SIGNALS

NO_ARM = "none"
COSTS = ("forward_tokens", "backward_tokens", "generated_tokens", "generation_seconds", "peak_memory_mb")


def transitions_of(table: pd.DataFrame, before: pd.Series, margin: float | None) -> dict:
    """heldout_items, heldout_F, heldout_BT of one variant's held-out scores (`table`: example_id, correct,
    margin, k); `before`: the base model's correctness (0 / 1) by example id of every item."""
    from ..correctness.transitions import known

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


def _same(a: float | None, b: float | None) -> bool:
    """Are two knob values the same (None and NaN: no knob)?"""
    a, b = (float("nan") if x is None else float(x) for x in (a, b))
    return (np.isnan(a) and np.isnan(b)) or a == b


def per_run(matrix: ForgettingMatrix, runs: list[dict], threshold: float = 0.0,
            transitions: ForgettingMatrix | None = None, margin: float | None = None) -> pd.DataFrame:
    """One row per variant of every run: its fine-tune (knob value) at α = 1 and at each interpolation (see
    the module docstring); `transitions` (the codes matrix) adds the held-out items' sample-wise rates."""
    base = pd.Series(matrix.base_nll.astype(np.float64), index=matrix.example_ids)
    before = None if transitions is None else pd.Series(transitions.values[0] // 2, index=transitions.example_ids)
    deltas, rows = {}, []
    for run in runs:
        facts = json.loads(Path(run["scores"]).with_suffix(".json").read_text())
        variants = facts.get("variants") or [{"knob": None, "value": np.nan, "alpha": 1.0, **facts}]
        tunes = facts.get("fine_tunes") or [{"value": np.nan, **facts}]
        swept = len(tunes) > 1
        for (value, alpha), scores in read_variants(run["scores"], before is not None):
            value = float("nan") if value is None else float(value)
            judged = next(v for v in variants if _same(v["value"], value) and v["alpha"] == alpha)
            trained = next(t for t in tunes if _same(t["value"], value))
            delta = scores["nll"].to_numpy(np.float64) - base.reindex(scores["example_id"]).to_numpy()
            label = f"{run['arm']} {judged['knob']}={value:g}" if swept else run["arm"]
            deltas[(label, alpha, run["seed"], run["task"])] = delta
            rows.append({"arm": run["arm"], "label": label, "knob": judged.get("knob") or "", "value": value,
                         "alpha": alpha, "task": run["task"], "seed": run["seed"],
                         "heldout_forgetting": float(np.nanmean(delta)), "target_nll": judged["validation_nll"],
                         **{k: judged.get(k, np.nan) for k in SIGNALS},
                         "tokens": trained["tokens"], "seconds": trained["seconds"],
                         **{k: trained.get(k) if trained.get(k) is not None else np.nan for k in COSTS},
                         "replayed": trained.get("replayed") or 0, "masked_share": trained.get("masked_share") or 0.0,
                         **({} if before is None else transitions_of(scores, before, margin))})
    frame = pd.DataFrame(rows)
    none = frame[(frame["arm"] == NO_ARM) & (frame["alpha"] == 1.0)].set_index(["task", "seed"])
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
    for (_, _, seed, task), delta in deltas.items():
        mask = forgotten(deltas[(NO_ARM, 1.0, seed, task)], threshold)
        on_forgotten.append(float(np.nanmean(delta[mask])) if mask.any() else np.nan)
    frame["forgetting_on_forgotten"] = on_forgotten
    columns = ["arm", "label", "knob", "value", "alpha", "task", "seed", "heldout_forgetting", "reduction",
               "forgetting_on_forgotten", "target_nll", *SIGNALS, "tokens", *COSTS, "seconds", "replayed",
               "masked_share", "reduction_per_extra_ktoken"]
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


def headline(frame: pd.DataFrame, arms: dict[str, dict]) -> tuple[pd.DataFrame, dict[str, dict]]:
    """The fine-tunes as trained (α = 1), each named by its label (an arm, or an arm's knob value in a
    sweep), and every label's arm spec: what the paired tests and the figures of single runs compare."""
    trained = frame[frame["alpha"] == 1.0].assign(arm=lambda f: f["label"]).reset_index(drop=True)
    labels = dict(zip(frame["label"], frame["arm"]))
    return trained, {label: arms[arm] for label, arm in labels.items()}


def cost_table(trained: pd.DataFrame) -> pd.DataFrame:
    """What each fine-tune cost, mean over (task, seed), and as a multiple of plain fine-tuning's at the
    same task and seed: tokens trained, tokens through forward and backward passes, tokens generated,
    seconds of training, peak memory."""
    figures = ["tokens", *COSTS, "seconds"]
    plain = trained[trained["arm"] == NO_ARM].set_index(["task", "seed"])[figures]
    rows = []
    for arm, part in trained.groupby("arm", sort=False):
        row = {"arm": arm, "runs": len(part)}
        reference = plain.reindex(pd.MultiIndex.from_frame(part[["task", "seed"]]))
        for figure in figures:
            values = part[figure].to_numpy(np.float64)
            row[figure] = float(np.nanmean(values)) if np.isfinite(values).any() else np.nan
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = values / reference[figure].to_numpy(np.float64)
            row[f"{figure}_vs_none"] = float(np.nanmean(ratio)) if np.isfinite(ratio).any() else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def summary_command(matrix: str, settings: dict, summary: str, tests: str, forgetting_figure: str,
                    paired_figure: str, tradeoff_figure: str, per_token_figure: str, fronts: str, costs: str,
                    predictors: str, fronts_figure: str, protection: str, transitions: str | None = None) -> dict:
    """`forgetmap mitigation-summary`; `settings["predictions"]`: task -> the prediction directory whose
    row says which held-out examples the task was predicted to forget."""
    from .. import plots
    from ..io import atomic_path
    from .fronts import against_interpolation, fronts_table, interpolation_tests, matched_learning, matched_tests
    from .protection import protection_table, value_key
    from .signals import predictor_table

    codes = None if transitions is None else ForgettingMatrix.read(transitions)
    forgetting = ForgettingMatrix.read(matrix)
    frame = per_run(forgetting, settings["runs"], settings["threshold"], codes, settings["margin"])
    trained, arms = headline(frame, {arm["name"]: arm for arm in settings["arms"]})
    table = pd.concat([paired_tests(trained, arms, settings["level"]),
                       matched_tests(matched_learning(frame), settings["level"]),
                       interpolation_tests(against_interpolation(frame), settings["level"])], ignore_index=True)
    points = fronts_table(frame)
    runs = frame[frame["alpha"] == 1.0]  # the fine-tunes as trained (an interpolation is no run of its own)
    signals = pd.concat([predictor_table(runs, target) for target in ("heldout_forgetting", "heldout_F")
                         if target in runs and runs[target].notna().any()], ignore_index=True)
    labels = {(arm, value_key(value)): label for arm, value, label in zip(frame["arm"], frame["value"], frame["label"])}
    protected = protection_table(settings["runs"], settings.get("predictions") or {}, labels)
    if forgetting.completed:  # a predicted arm's replay was chosen from rows of a fractional map: said in its tables
        for data in (frame, table):
            data["map"] = forgetting.reads()
    for data, path in ((frame, summary), (table, tests), (points, fronts), (cost_table(trained), costs),
                       (signals, predictors), (protected, protection)):
        with atomic_path(path) as tmp:
            data.to_csv(tmp, sep="\t", index=False, float_format="%.6g")
    plots.mitigation_forgetting(trained, table[table["statistic"].isin(["heldout_forgetting", "heldout_F"])],
                                forgetting_figure)
    plots.mitigation_paired(trained, comparisons(arms), paired_figure)
    plots.mitigation_tradeoff(trained, tradeoff_figure)
    plots.mitigation_per_token(trained, per_token_figure)
    plots.mitigation_fronts(frame, points, fronts_figure)
    means = trained.groupby("arm", sort=False)["heldout_forgetting"].mean()
    result = {"runs": len(trained), "variants": len(frame),
              **{f"forgetting_{arm}": round(float(v), 5) for arm, v in means.items()}}
    if "heldout_F" in trained:
        rates = trained.groupby("arm", sort=False)["heldout_F"].mean()
        result.update({f"F_{arm}": round(float(v), 4) for arm, v in rates.items()})
    return result
