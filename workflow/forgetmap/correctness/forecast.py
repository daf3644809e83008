"""A new checkpoint's forgetting rates from k scored items: what the map of the other checkpoints saves.

A post-trained checkpoint's sampled evaluation generates answers for every item (Harmon et al.: up to
32,768 tokens each, three seeds). Its reference is already evaluated in full, and so are the other rows
of the map. Score only k of its items; complete its row of seed-mean correctness (`after`, rows x items,
in [0, 1]) with a completion method fitted on the measured rows (`forgetmap.predict`), keep the k
measured values, and read the rates off the completed row against the reference's full row:
F = mean_i before_i (1 - after_i), BT = mean_i (1 - before_i) after_i (the expectation of Harmon's
per-seed counts with independently sampled seeds), per source and overall.

`direct` is what k items give without the map: the same rates over the k scored items alone.

With intervals (the forgetting monitor's items, a forecast checkpoint's rates in the workflow): `bounded_rates`
corrects the completed row's rates by the k items' cross-fitted residuals (each scored item's forecast from the
other k - 1: `complete_items`) and bounds them with Student's t (forgetmap.predict.bound.crossfit_bound), valid
over a random draw of the k items; `naive_rates` are the k items' own shares with exact binomial intervals.
Chance-adjusted rates (Harmon et al.): F_true = max(0, F - s), BT_true = max(0, BT - s), s the expected share
of spurious flips at the estimated accuracies (`spurious`), whose own uncertainty is not carried into their
interval.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..predict.bound import MeanBound, binomial_interval, crossfit_bound
from ..predict.registry import method_class

RATES = ("acc", "F", "BT")


def rates(before: np.ndarray, after: np.ndarray) -> tuple[float, float]:
    """(F, BT) of seed-mean correctness vectors: the expected 1->0 and 0->1 shares."""
    return float(np.mean(before * (1 - after))), float(np.mean((1 - before) * after))


def complete_rows(train: np.ndarray, known_columns: np.ndarray, known_values: np.ndarray, method: str = "additive",
                  params: dict | None = None) -> np.ndarray:
    """Rows of correctness completed from their known items by `method` fitted on `train` (rows x items),
    clipped to [0, 1], the known items kept as measured."""
    model = method_class(method)(**(params or {})).fit(np.asarray(train, dtype=np.float32))
    completed = np.clip(model.predict(known_columns, known_values.astype(np.float32)), 0.0, 1.0)
    rows = np.arange(len(known_columns))[:, None]
    completed[rows, known_columns] = known_values
    return completed


def forecast_rates(train: np.ndarray, before: np.ndarray, known_columns: np.ndarray, known_values: np.ndarray,
                   method: str = "additive", params: dict | None = None) -> np.ndarray:
    """(T, 2) forecast (F, BT) of T new rows from their known items, each against the reference `before`
    (items,) or one per row (T, items)."""
    completed = complete_rows(train, known_columns, known_values, method, params)
    before = np.broadcast_to(np.atleast_2d(before), completed.shape)
    return np.array([rates(b, a) for b, a in zip(before, completed)])


def direct_rates(before: np.ndarray, after: np.ndarray, known_columns: np.ndarray) -> np.ndarray:
    """(T, 2) the rates over the known items alone (no map): the estimate k scored items give by themselves."""
    before = np.broadcast_to(np.atleast_2d(before), after.shape)
    return np.array([rates(b[c], a[c]) for b, a, c in zip(before, after, known_columns)])


def spurious(before: np.ndarray, now: np.ndarray, options: np.ndarray) -> float:
    """The expected share of flips of items unknown at both times (Harmon et al.), per group of items with the
    same number of options, weighted by its size: (1 - acc_before)(1 - acc_now) / (options - 1)."""
    total = 0.0
    for k in np.unique(options):
        group = options == k
        if k >= 2:
            total += group.mean() * (1 - np.mean(before[group])) * (1 - np.mean(now[group])) / (k - 1)
    return float(total)


def per_item(rate: str, before: np.ndarray, now: np.ndarray) -> np.ndarray:
    """Each item's share of a rate: acc the chance it is right now; F right before and wrong now; BT the reverse."""
    if rate == "acc":
        return now
    if rate == "F":
        return before * (1 - now)
    return (1 - before) * now


def bounded_rates(forecast: np.ndarray, known: np.ndarray, values: np.ndarray, held_out: np.ndarray | None,
                   before: np.ndarray, options: np.ndarray, level: float,
                   weight: float | str = 1.0) -> dict[str, MeanBound]:
    """acc, F, BT and their chance-adjusted forms over the items, each bounded at `level`: `forecast` each item's
    probability of being right now (N,), `known` the scored items and `values` their 0/1, `held_out` their
    cross-fitted forecasts (None: no map, the rates are the k items' own); `weight` the forecast's
    (forgetmap.predict.bound: 1, or "tuned" on the scored items)."""
    if held_out is None:
        return naive_rates(values, before[known], options[known], level)
    out = {}
    for rate in RATES:  # shares: the estimate and its interval clipped to [0, 1]
        found = crossfit_bound(per_item(rate, before, forecast), known, per_item(rate, before[known], values),
                               per_item(rate, before[known], held_out), level, weight)
        out[rate] = MeanBound(*np.clip([found.estimate, found.lower, found.upper], 0.0, 1.0).tolist(), found.weight)
    return {**out, **chance_adjusted(out, before, np.clip(forecast, 0, 1), options)}


def naive_rates(values: np.ndarray, before: np.ndarray, options: np.ndarray, level: float) -> dict[str, MeanBound]:
    """The rates over the scored items alone, each with an exact binomial interval (items drawn at random)."""
    values = np.asarray(values, dtype=np.float64)
    before = np.asarray(before, dtype=np.float64)
    out = {rate: binomial_interval(int(round(per_item(rate, before, values).sum())), len(values), level)
           for rate in RATES}
    return {**out, **chance_adjusted(out, before, values, options)}


def chance_adjusted(rates: dict[str, MeanBound], before: np.ndarray, now: np.ndarray,
                    options: np.ndarray) -> dict[str, MeanBound]:
    """F_true and BT_true: F and BT less the expected share of spurious flips at the accuracies `before` and `now`
    (`spurious`), whose own uncertainty is not carried into their interval."""
    s = spurious(before, now, options)

    def less(bound):
        return MeanBound(max(0.0, bound.estimate - s), max(0.0, bound.lower - s), max(0.0, bound.upper - s))
    return {"F_true": less(rates["F"]), "BT_true": less(rates["BT"])}


def complete_items(model, known: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(each of the n items' probability of being right now, the scored items kept as measured; each scored
    item's forecast from the other k - 1 (cross-fitted), or None where there is no fitted map (`model` None))."""
    row = np.full(n, np.nan)
    row[known] = values
    if model is None:
        return row, None
    values = np.asarray(values, dtype=np.float32)
    row = np.clip(model.predict(known[None], values[None])[0], 0, 1).astype(np.float64)
    row[known] = values
    k = len(known)
    others = np.array([np.delete(np.arange(k), j) for j in range(k)])
    held = np.clip(model.predict(known[others], values[others]), 0, 1)
    return row, held[np.arange(k), known].astype(np.float64)


def rate_columns(rates: dict[str, MeanBound], naive: dict[str, MeanBound]) -> dict[str, float]:
    """A line's item columns: each rate's estimate and interval (`items_*`), and the k items' own (`items_naive_*`)."""
    line = {}
    for prefix, found in (("items_", rates), ("items_naive_", naive)):
        for rate in RATES:
            line[f"{prefix}{rate}"] = found[rate].estimate
            line[f"{prefix}{rate}_lower"] = found[rate].lower
            line[f"{prefix}{rate}_upper"] = found[rate].upper
    return line


def measured_columns(before: np.ndarray, after: np.ndarray) -> dict[str, float]:
    """A measured row's rates over the same items: what the forecast is scored against."""
    return {"items_measured_acc": float(np.mean(after)), "items_measured_F": float(np.mean(before * (1 - after))),
            "items_measured_BT": float(np.mean((1 - before) * after))}


def scored_correctness(path: str, ids: list[str]) -> np.ndarray:
    """Each of `ids` right (1) or wrong (0) in a score file (seed 0's where answers were sampled, as the transitions
    file holds), NaN where it was not scored."""
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    table = pq.read_table(path, columns=["example_id", *(["correct_seeds"] if "correct_seeds" in names else []),
                                         "correct"])
    if "correct_seeds" in names:
        values = [np.nan if v is None or not len(v) else float(v[0]) for v in table.column("correct_seeds").to_pylist()]
    else:
        values = [np.nan if v is None else float(v) for v in table.column("correct").to_pylist()]
    found = dict(zip(table.column("example_id").to_numpy().astype(str), values))
    return np.array([found.get(e, np.nan) for e in ids], dtype=np.float64)


class ItemRates:
    """Rows of correctness over a population of items (a corpus's, recorded with the k drawn from it; free-form
    items have no options, so no chance-adjusted share), each forecast from its k scored items through the fit rows
    of a transitions file (`additive`, one fit for every row), and its rates read against a reference: what the
    forecast job writes per task and the trajectory job per check. `model` is None where fewer than two fit rows
    are in the file: no forecast."""

    def __init__(self, transitions: str, fit_tasks: list[str], population, options, where: str):
        from ..errors import DataError
        from ..matrix import ForgettingMatrix
        from ..predict.registry import make_method

        self.matrix = ForgettingMatrix.read(transitions)
        self.population = np.asarray(population).astype(str)
        self.options = np.asarray(options, dtype=np.int16)
        position = {e: i for i, e in enumerate(self.matrix.example_ids.astype(str))}
        missing = [e for e in self.population if e not in position]
        if missing:
            raise DataError(f"{transitions}: item(s) {missing[:3]} of {where} are not among its items: rebuild them")
        self.columns = np.array([position[e] for e in self.population], dtype=np.int64)
        fits = [t for t in fit_tasks if t in self.matrix.tasks]
        self.model = make_method("additive").fit(np.stack([self.after(t) for t in fits])) if len(fits) >= 2 else None
        self._index = {e: i for i, e in enumerate(self.population)}

    def after(self, run: str) -> np.ndarray | None:
        """A measured run's correctness at the population (its row of the transitions file), None where it is not
        a row."""
        return None if run not in self.matrix.tasks else np.mod(self.matrix.row(run)[self.columns], 2).astype(np.float64)

    def positions(self, ids) -> np.ndarray:
        return np.array([self._index[e] for e in ids], dtype=np.int64)

    def line(self, known: np.ndarray, values: np.ndarray, before: np.ndarray, level: float) -> tuple[dict, dict, dict]:
        """(the columns, the rates, the naive rates) of a row whose items at `known` scored `values`."""
        row, held = complete_items(self.model, known, values, len(self.population))
        rates = bounded_rates(row, known, values, held, before, self.options, level)
        naive = naive_rates(values, before[known], self.options[known], level)
        return rate_columns(rates, naive), rates, naive


def item_forecasts(transitions: str, probes: str, settings: dict, scores: list[str],
                   base_scores: list[str]) -> dict[str, dict]:
    """{forecast task: its correctness rates' columns}: the items that follow the probes (forgetmap.predict.
    forecast.probes_command), decided by each task's probe scoring (or its monitored fine-tune's last check),
    completed through the fit rows of the transitions file (`ItemRates`), against the task's reference (the
    base's score files, or a measured reference's row); a task measured in full also gets its measured rates."""
    from ..io import read_metadata
    from ..predict.forecast import read_item_record

    record = read_metadata(probes).get("items")
    if not record:
        return {}
    rates = ItemRates(transitions, settings["fit_tasks"], record["population"], record["options"],
                      "the probes' population")
    if rates.model is None:
        return {}
    chosen = list(record["ids"])
    known = rates.positions(chosen)
    base = base_correctness(base_scores, rates.population.tolist())
    level = max(settings["intervals"]) if settings["intervals"] else 0.9
    out = {}
    for task, path in zip(settings["tasks"], scores):
        reference = settings.get("references", {}).get(task, "base")
        before = base if reference == "base" else rates.after(reference)
        if before is None or not np.isfinite(before).all():
            continue  # a reference that is itself forecast, or items its scoring left out: no rates
        if Path(path).is_dir():  # a monitored fine-tune: its last check, on the weights it saved
            _, ids, values, _, _ = read_item_record(path)
            last = dict(zip(ids, values[-1]))
            values = np.array([last.get(e, np.nan) for e in chosen])
        else:
            values = scored_correctness(path, chosen)
        scored = np.isfinite(values)
        if scored.sum() < 2:
            continue
        line, _, _ = rates.line(known[scored], values[scored], before, level)
        line["items_k"] = int(scored.sum())
        truth = rates.after(task)
        if truth is not None:
            line.update(measured_columns(before, truth))
        out[task] = line
    return out


def base_correctness(base_scores: list[str], ids: list[str]) -> np.ndarray:
    """The base's correctness at `ids` from its score files (NaN where none scored it)."""
    found = np.full(len(ids), np.nan)
    for path in base_scores:
        values = scored_correctness(path, ids)
        found = np.where(np.isfinite(values), values, found)
    return found


def forecast_with_items(settings: dict, matrix: str, probes: str, scores: list[str], base_scores: list[str], out: str,
                        summary: str, figure: str, transitions: str | None = None) -> dict:
    """`forgetmap forecast`: the forecast job (forgetmap.predict.forecast.forecast_command); with the transitions
    file of a corpus with multiple-choice items, each forecast task's accuracy, F and BT too (`item_forecasts`),
    in its summary line."""
    from ..predict.forecast import forecast_command

    columns = item_forecasts(transitions, probes, settings, scores, base_scores) if transitions else None
    return forecast_command(settings, matrix, probes, scores, base_scores, out, summary, figure, columns)
