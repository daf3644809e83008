"""The arena judged as a trade-off: how much of the task each fine-tune learned (its validation NLL, lower is
more) against how much it forgot (mean held-out ΔNLL, lower is less), one point per (arm, knob value, α).

- `pareto`: the points no other point beats on both axes (ties kept);
- `fronts_table`: every point's means over (task, seed), and whether it lies on its arm's front and on the
  front of all arms together;
- `matched_learning`: per (arm, task, seed), the arm's forgetting where its front reaches plain fine-tuning's
  learning at that task and seed (linear between the two front points around it; NaN where the front does
  not span it, never extrapolated): the forgetting an arm pays for the same learning, which the existing
  paired tests (forgetmap.stats) then compare with plain fine-tuning's over (task, seed);
- `against_interpolation`: the other way round, each fine-tune as trained against plain fine-tuning's
  interpolation front (its α sweep) at the fine-tune's own learning: what a method buys over WiSE-FT.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NO_ARM = "none"
LEARNING, FORGETTING = "target_nll", "heldout_forgetting"


def pareto(learning: np.ndarray, forgetting: np.ndarray) -> np.ndarray:
    """Boolean mask of the points no other point dominates (lower or equal on both, lower on one)."""
    x, y = np.asarray(learning, np.float64), np.asarray(forgetting, np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    keep = np.zeros(len(x), dtype=bool)
    for i in np.flatnonzero(ok):
        dominated = ok & (x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i]))
        keep[i] = not dominated.any()
    return keep


POINT = ["arm", "label", "knob", "value", "alpha"]


def fronts_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per point (arm, knob value, α): mean learning and forgetting over (task, seed), with `on_arm_front`
    and `on_front` (all arms)."""
    columns = [LEARNING, FORGETTING] + [c for c in ("heldout_F",) if c in frame]
    means = (frame.groupby(POINT, sort=False, dropna=False)[columns].mean().reset_index())
    means["runs"] = frame.groupby(POINT, sort=False, dropna=False).size().to_numpy()
    means["on_arm_front"] = False
    for _, rows in means.groupby("arm", sort=False):
        means.loc[rows.index, "on_arm_front"] = pareto(rows[LEARNING].to_numpy(), rows[FORGETTING].to_numpy())
    means["on_front"] = pareto(means[LEARNING].to_numpy(), means[FORGETTING].to_numpy())
    return means


def at_learning(learning: np.ndarray, forgetting: np.ndarray, target: float) -> float:
    """Forgetting on the front of these points where it reaches `target` learning (NaN outside its span)."""
    on = pareto(learning, forgetting)
    x, y = np.asarray(learning, np.float64)[on], np.asarray(forgetting, np.float64)[on]
    if not len(x) or not np.isfinite(target) or target < x.min() or target > x.max():
        return float("nan")
    order = np.argsort(x, kind="stable")
    return float(np.interp(target, x[order], y[order]))


def matched_learning(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, task, seed): plain fine-tuning's learning and forgetting as trained, and the arm's forgetting
    on its front at that learning (`matched_forgetting`, NaN where its front does not reach it)."""
    plain = frame[(frame["arm"] == NO_ARM) & (frame["alpha"] == 1.0)].set_index(["task", "seed"])
    rows = []
    for (arm, task, seed), points in frame.groupby(["arm", "task", "seed"], sort=False):
        if (task, seed) not in plain.index:
            continue
        target = float(plain.loc[(task, seed), LEARNING])
        rows.append({"arm": arm, "task": task, "seed": seed, "none_learning": target,
                     "none_forgetting": float(plain.loc[(task, seed), FORGETTING]), "points": len(points),
                     "matched_forgetting": at_learning(points[LEARNING].to_numpy(), points[FORGETTING].to_numpy(),
                                                       target)})
    return pd.DataFrame(rows)


def against_interpolation(frame: pd.DataFrame) -> pd.DataFrame:
    """Per fine-tune as trained (label, task, seed): its forgetting, and plain fine-tuning's on its own
    interpolation front (α toward the base) at the same learning (`interpolated_forgetting`, NaN outside
    that front's span): does the method forget less than simply stopping plain fine-tuning short in weight
    space (WiSE-FT, the front Lin et al. found best)?"""
    plain = frame[frame["arm"] == NO_ARM]
    fronts = {key: points for key, points in plain.groupby(["task", "seed"], sort=False)}
    rows = []
    for r in frame[(frame["alpha"] == 1.0) & (frame["arm"] != NO_ARM)].itertuples(index=False):
        points = fronts.get((r.task, r.seed))
        reference = float("nan") if points is None or len(points) < 2 else at_learning(
            points[LEARNING].to_numpy(), points[FORGETTING].to_numpy(), getattr(r, LEARNING))
        rows.append({"arm": r.label, "task": r.task, "seed": r.seed, "learning": getattr(r, LEARNING),
                     "forgetting": getattr(r, FORGETTING), "interpolated_forgetting": reference})
    return pd.DataFrame(rows, columns=["arm", "task", "seed", "learning", "forgetting", "interpolated_forgetting"])


def matched_tests(matched: pd.DataFrame, level: float) -> pd.DataFrame:
    """Every arm's forgetting at plain fine-tuning's learning against plain fine-tuning's, paired over
    (task, seed) where its front reaches that learning (`n` says how many)."""
    from ..stats import paired_test

    rows = []
    for arm, part in matched.groupby("arm", sort=False):
        if arm == NO_ARM:
            continue
        result = paired_test(part["matched_forgetting"].to_numpy(), part["none_forgetting"].to_numpy(),
                             part["task"].to_numpy(), level)
        rows.append({"statistic": "forgetting_at_matched_learning", "arm": arm, "baseline": NO_ARM,
                     "reached": int(np.isfinite(part["matched_forgetting"]).sum()), "pairs": len(part), **result})
    return pd.DataFrame(rows)


def interpolation_tests(compared: pd.DataFrame, level: float) -> pd.DataFrame:
    """Every fine-tune's forgetting against plain fine-tuning's interpolation front at its learning, paired
    over (task, seed) where that front spans its learning."""
    from ..stats import paired_test

    rows = []
    for arm, part in compared.groupby("arm", sort=False):
        result = paired_test(part["forgetting"].to_numpy(), part["interpolated_forgetting"].to_numpy(),
                             part["task"].to_numpy(), level)
        rows.append({"statistic": "forgetting_vs_interpolation", "arm": arm, "baseline": f"{NO_ARM} interpolated",
                     "reached": int(np.isfinite(part["interpolated_forgetting"]).sum()), "pairs": len(part),
                     **result})
    return pd.DataFrame(rows)
