"""Forecasts over training, as the explorer shows them (forgetmap.explorer).

- `run_timeline`: a trainer run's checks (the callback's `OUTPUT_DIR/forgetmap-monitor/`) as the page of their
  own: each check's scalars over the steps (the mean and its interval, the forecast's own mean, the probes'
  mean, the share forecast forgotten, the replayed share; a check written before the headline became the
  estimate its interval bounds is read under today's names: `current_scalars`), and the examples forecast most
  forgotten at any check with their forecast and interval at every check, their texts where the upstream shards
  are given (the probes' always: the map carries them).
- `task_timelines`: a workflow model's monitored fine-tunes (`forecast/trajectory.tsv`) for its page's tasks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError

CHECK_GLOB = "check-*.parquet"
SERIES = ("mean", "lower", "upper", "forecast_mean", "probe_mean", "forecast_forgotten", "over_budget",
          "over_budget_upper", "forecast_over_budget", "replay_share")


def current_scalars(scalars: dict) -> dict:
    """A check's scalars under today's names, whenever they were written. Before, `mean` was the forecast's mean
    and `estimate` the audit-corrected one its interval bounded (and `forgotten`, `over_budget` the forecast's
    shares); now `mean` is the estimate its interval bounds, the forecast's own values are `forecast_*`."""
    if "forecast_mean" in scalars or "mean" not in scalars:
        return dict(scalars)
    old = dict(scalars)
    out = {k: v for k, v in old.items() if k not in ("mean", "estimate", "forgotten", "over_budget")}
    out["forecast_mean"] = old["mean"]
    out["mean"] = old.get("estimate", old["mean"])
    if "forgotten" in old:
        out["forecast_forgotten"] = old["forgotten"]
    if "over_budget" in old:
        out["forecast_over_budget"] = old["over_budget"]
        if "over_budget_upper" not in old:  # no bound: the forecast's share was the only estimate
            out["over_budget"] = old["over_budget"]
    return out


def _round(values) -> list:
    return [None if v is None or not np.isfinite(v) else round(float(v), 4) for v in values]


def run_timeline(checks: str | Path, shards: list[str] | None = None, top: int = 20) -> tuple[dict, list[dict]]:
    """(the page's data for the run whose checks are in `checks`, the upstream rows of the examples it carries
    whose texts are known); `top`: examples carried per check."""
    import pandas as pd

    from ..io import read_metadata
    from .map import ForecastMap

    directory = Path(checks)
    files = sorted(directory.glob(CHECK_GLOB))
    if not files:
        raise DataError(f"{directory}: no forecast rows ({CHECK_GLOB}): a ForgettingMonitor with a map writes them "
                        f"under its trainer's output_dir/forgetmap-monitor")
    metas = [read_metadata(f) for f in files]
    frames = [pd.read_parquet(f) for f in files]
    ids = frames[0]["example_id"].astype(str).to_numpy()
    for f, frame in zip(files[1:], frames[1:]):
        if not np.array_equal(frame["example_id"].astype(str).to_numpy(), ids):
            raise DataError(f"{f}: its examples are not those of {files[0].name}: checks of another map")
    map_path = next((p for p in (directory / "map.parquet", Path(metas[-1].get("map") or "")) if p.is_file()), None)
    forecast_map = ForecastMap.read(map_path) if map_path is not None else None
    levels = metas[-1].get("levels") or []
    width = f"halfwidth_{max(levels):g}" if levels else None
    forecasts = np.stack([frame["forecast"].to_numpy(np.float64) for frame in frames])  # (checks, examples)
    widths = np.stack([frame[width].to_numpy(np.float64) for frame in frames]) if width else None
    probe = frames[0]["probe"].to_numpy(bool)
    carried: dict[int, None] = {}
    for row in forecasts:
        for i in np.argsort(-row, kind="stable")[:top]:
            carried.setdefault(int(i), None)
    for i in np.flatnonzero(probe):
        carried.setdefault(int(i), None)
    chosen = np.fromiter(carried, dtype=np.int64)
    records = _records(ids[chosen], shards, forecast_map)
    base = dict(zip(forecast_map.example_ids, forecast_map.base_nll)) if forecast_map is not None else {}
    examples = {}
    for i in chosen:
        example_id = ids[i]
        examples[example_id] = {"source": str(frames[0]["source"].iloc[i]), "probe": bool(probe[i]),
                                "base_nll": _round([base.get(example_id)])[0],
                                "forecast": _round(forecasts[:, i]),
                                "halfwidth": _round(widths[:, i]) if widths is not None else None}
    ranked = chosen[np.argsort(-forecasts[-1][chosen], kind="stable")]  # by the last check's forecast
    scalars = [current_scalars(m.get("scalars", {})) for m in metas]
    return ({
        "model": directory.parent.name or str(directory), "mode": "run", "path": str(directory),
        "map": str(map_path) if map_path is not None else metas[-1].get("map"), "method": metas[-1].get("method"),
        "level": metas[-1].get("level"), "halfwidth_level": max(levels) if levels else None,
        "budget": metas[-1].get("budget"),
        "n_examples": int(len(ids)), "k": int(probe.sum()), "texts": bool(shards),
        "timeline": {"steps": [int(m["step"]) for m in metas], "epochs": _round([m.get("epoch") for m in metas]),
                     **{name: _round([s.get(name) for s in scalars]) for name in SERIES
                        if any(name in s for s in scalars)}},
        "top": [ids[i] for i in ranked if not probe[i]][:top], "probes": [ids[i] for i in np.flatnonzero(probe)],
        "examples": examples, "carried": int(len(chosen)),
    }, records)


def _records(example_ids: np.ndarray, shards: list[str] | None, forecast_map) -> list[dict]:
    """These examples' upstream rows (the explorer makes them into texts): from the shards where given, else the
    probes' from the map, else none."""
    if shards:
        from ..data.upstream import read_ids, read_rows

        position = {str(e): k for k, e in enumerate(read_ids(shards))}
        missing = [e for e in example_ids if e not in position]
        if missing:
            raise DataError(f"{shards[0]}: example {missing[0]!r} of the checks is not in these upstream shards: give "
                            f"the shards the map was made from")
        return read_rows(shards, np.array([position[e] for e in example_ids])).to_dict("records")
    return forecast_map.probe_rows.to_dict("records") if forecast_map is not None else []


def task_timelines(trajectory: str | Path) -> dict:
    """{task: its checks} from a workflow's `forecast/trajectory.tsv`: steps, share of the steps, the mean and the
    upper end of its interval (the run's own estimate, from each check's audit examples; without them the
    forecast's mean and the map's constant interval), the forecast's own mean, the probes' mean, and (a `check`
    task) the measured final row's mean."""
    import pandas as pd

    table = pd.read_csv(trajectory, sep="\t")
    upper = next((c for prefix in ("estimate_upper_", "forecast_upper_") for c in table.columns
                  if c.startswith(prefix)), None)
    headline = "estimate" if upper and upper.startswith("estimate_") else "forecast_mean"
    out = {}
    for task, rows in table.groupby("task", sort=False):
        out[str(task)] = {"steps": rows["step"].astype(int).tolist(), "fraction": _round(rows["fraction"]),
                          "mean": _round(rows[headline]), "forecast_mean": _round(rows["forecast_mean"]),
                          "probe_mean": _round(rows["probe_mean"]),
                          "upper": _round(rows[upper]) if upper else None,
                          "level": float(upper.rsplit("_", 1)[1]) if upper else None,
                          "measured": _round(rows["measured_mean"])[-1] if "measured_mean" in rows else None}
    return out
