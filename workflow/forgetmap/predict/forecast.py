"""Forecast a new task's forgetting from k scored examples: the paper's saving, as a workflow.

Once a matrix exists, a new task needs one fine-tune and one scoring job of k upstream examples, not a
scoring job per upstream shard: its row is completed from those k entries by a method fitted on the
measured tasks' rows (the *fit tasks*). Three steps, each a job:

- `probes_command`: the k probe examples, chosen from the fit tasks' rows alone by the strategy
  (forgetmap.predict.probes: `dopt` by default, `random` as the paper), written as upstream rows (the
  upstream contract) so the ordinary score job scores a forecast task's checkpoint on them;
- the score job (`forgetmap score`) on each forecast task's checkpoint;
- `forecast_command`: each forecast task's probe values Z = NLL(task) − NLL(base) (the base's NLL is
  the matrix's `base_nll`), folded in by the method fitted on the fit tasks; split-conformal
  half-widths from leave-one-fit-task-out folds (forgetmap.predict.conformal), the same for every
  forecast task since they share the probes. A forecast task that is also measured (`check`) has its
  forecast scored against its measured row: RMSE, top-10 % F1, precision at the budget, coverage.

The probes are the same for every forecast task of a model: one probe file, one conformal pass.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..errors import DataError
from .audit import audit_draw, audit_positions, audit_record
from .conformal import coverage, halfwidths
from .ends import studentized_ends
from .metrics import evaluate
from .probes import choose_probes, design
from .protocol import interval_capable, interval_column
from .registry import make_method

log = logging.getLogger(__name__)


def fit_rows(matrix, fit_tasks: list[str], where: str, base: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(the fit tasks' rows over the usable examples (float32), the usable examples' corpus indices):
    examples measured (not NaN) under every fit task, and with a base NLL where `base` (a forecast from
    probes scored after the fine-tune alone takes their change from it)."""
    missing = [t for t in fit_tasks if t not in matrix.tasks]
    if missing:
        raise DataError(f"{where}: fit task(s) {missing[:5]} are not rows of the forgetting matrix: rebuild it")
    rows = matrix.values[[matrix.tasks.index(t) for t in fit_tasks]]
    usable = np.flatnonzero(np.isfinite(rows).all(axis=0) & (np.isfinite(matrix.base_nll) if base else True))
    return np.ascontiguousarray(rows[:, usable], dtype=np.float32), usable


def chosen_probes(forgetting, fit_tasks: list[str], matrix: str, probes: str, chosen: dict):
    """(the fit rows, the usable examples' corpus indices, the probes' corpus indices, their positions among
    the usable examples) for the probes file `probes` (its metadata `chosen`), checked against the matrix."""
    train, usable = fit_rows(forgetting, fit_tasks, matrix)
    index = np.asarray(chosen["indices"], dtype=np.int64)
    known = np.minimum(np.searchsorted(usable, index), len(usable) - 1)  # a probe no longer usable: caught below
    if len(usable) != chosen["usable"] or not np.array_equal(usable[known], index):
        raise DataError(f"{probes}: its probes are not usable examples of {matrix}: rebuild it")
    return train, usable, index, known


def choose(train: np.ndarray, k: int, strategy: str, seed: int, where: str) -> np.ndarray:
    """The k probe positions among the usable examples, from the fit tasks' rows alone."""
    if k >= train.shape[1]:
        raise DataError(f"{where}: k = {k} probes leave nothing to forecast among {train.shape[1]} usable examples")
    phi, ridge, noise = design(train) if strategy != "random" else (None, 1.0, None)
    return choose_probes(strategy, train.shape[1], k, seed, phi, ridge, noise)


def probes_command(settings: dict, shards: list[str], scores: list[str], out: str) -> dict:
    """`forgetmap forecast-probes`: the k probe examples (upstream rows, in corpus order) for the score
    job, chosen from the fit rows assembled from their own score files (`settings["rows"]`, as the matrix
    job assembles them); the metadata records their corpus indices, the strategy and the fit tasks. The audit
    examples follow them (`settings["audit"]`, drawn at random by strata of the fit rows from the other usable
    examples with the seed, forgetmap.predict.audit: what bounds each forecast's mean by its own measurements,
    forgetmap.predict.bound), their corpus indices recorded as `audit`, the strata as `audit_strata`. Where the
    corpus has items (`settings["items"]`), k of them drawn at random follow (those not already probes or audit
    examples), so a forecast task's probe scoring also decides them right or
    wrong (the forecast job's correctness rates); the metadata records which, and every item they were drawn from
    (multiple choice, or with `generated` free form too) with its number of options (0: free form)."""
    import pyarrow as pa

    from ..data.upstream import present, read_rows
    from ..io import write_table
    from ..matrix import assemble_rows

    del scores  # the settings name each run's files; the rule lists them so the DAG waits for them
    forgetting = assemble_rows(settings["rows"], shards)
    train, usable = fit_rows(forgetting, settings["fit_tasks"], "the fit rows")
    probes = choose(train, settings["k"], settings["probes"], settings["seed"], "the fit rows")
    index = usable[probes]
    drawn, strata = audit_draw(train, probes, settings.get("audit", 0), settings["seed"])
    audit = usable[drawn]
    rows = read_rows(shards, np.concatenate([index, audit]))
    record = {"indices": index.tolist(), "k": settings["k"], "probes": settings["probes"], "seed": settings["seed"],
              "fit_tasks": settings["fit_tasks"], "usable": len(usable), "audit": audit.tolist(),
              "audit_strata": audit_record(strata, drawn)}
    items = settings.get("items")
    population, known = chosen_items(shards, items["k"], items["seed"], items["generated"]) \
        if items else ([], [])
    if len(population):
        import pandas as pd

        chosen = population.iloc[known]
        extra = chosen[~chosen["index"].isin(np.concatenate([index, audit]))]
        if len(extra):  # (none where the probes and the audit examples hold every item)
            rows = pd.concat([rows, read_rows(shards, extra["index"].to_numpy())], ignore_index=True)
        record["items"] = {"ids": chosen["example_id"].astype(str).tolist(),
                           "population": population["example_id"].astype(str).tolist(),
                           "options": [len(c) if present(c) else 0 for c in population["choices"]]}
    write_table(pa.Table.from_pandas(rows, preserve_index=False), out, record)
    return {"probes": len(index), "strategy": settings["probes"], "fit_tasks": len(settings["fit_tasks"]),
            "usable": len(usable), "audit": len(audit), "items": len(record.get("items", {}).get("ids", []))}


PROBE_RECORD = "monitor.parquet"  # a monitored fine-tune's probes, in its checkpoint directory
ITEM_RECORD = "monitor-items.parquet"  # and the items it watched (forgetmap.monitor.item_trajectory)


def answered_items(shards: list[str], generated: bool = False):
    """The corpus's items, in corpus order, with their corpus index (`index`): those with options (multiple
    choice), or with `generated` every item with an answer (free form too); none where the corpus has none."""
    import pandas as pd

    frames, start = [], 0
    for shard in shards:
        frame = pd.read_parquet(shard)
        frame["index"] = np.arange(start, start + len(frame))
        start += len(frame)
        if "choices" in frame and "answer" in frame:
            answered = frame["answer"].notna()
            frames.append(frame[answered if generated else answered & frame["choices"].notna()])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["example_id", "choices", "index"])


def chosen_items(shards: list[str], k: int, seed: int, generated: bool = False):
    """(the corpus's items (multiple choice, or with `generated` every item with an answer), the positions of k of
    them drawn at random with `seed`, ascending): the items a forecast task's probe scoring and a monitored fine-tune
    both score (all where there are k or fewer)."""
    population = answered_items(shards, generated)
    n = len(population)
    known = np.arange(n) if k >= n else np.sort(np.random.default_rng(seed).choice(n, k, replace=False))
    return population, known


def read_item_record(checkpoint: str) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(the check steps, the scored items' ids, their 0/1 per step (steps x k), the population's ids, their options)
    of a monitored fine-tune that watched items."""
    meta, table, values = _step_record(Path(checkpoint) / ITEM_RECORD, "the fine-tune watched no items; rerun it "
                                       "(finetune.monitor on a corpus with items)")
    return (meta["steps"], table.column("item_id").to_numpy().astype(str), values.astype(np.float64),
            np.asarray(meta["population"]), np.asarray(meta["options"], dtype=np.int16))


def _step_record(path: Path, missing: str):
    """(metadata, table, its values per recorded step (steps x rows)) of a monitored fine-tune's record; `missing`:
    what to say where the fine-tune left none."""
    import pyarrow.parquet as pq

    from ..io import read_metadata

    if not path.exists():
        raise DataError(f"{path.parent}: no {path.name}: {missing}")
    meta = read_metadata(path)
    table = pq.read_table(path)
    return meta, table, np.stack([table.column(f"step_{s}").to_numpy() for s in meta["steps"]])


def read_probe_record(checkpoint: str, measured_ids: np.ndarray) -> tuple[list[int], int, np.ndarray, int]:
    """(the steps, the fine-tune's total steps, the NLL of the probes and then the audit examples (step 0 and each
    check, k + audit), the tokens one check scores) of a monitored fine-tune (forgetmap.monitor.trajectory writes
    it); `measured_ids` the probes' ids, then the audit examples'."""
    path = Path(checkpoint) / PROBE_RECORD
    meta, table, nll = _step_record(path, "the fine-tune was not monitored (no probe record); rerun it "
                                          "(finetune.monitor)")
    if not np.array_equal(table.column("example_id").to_numpy().astype(str), measured_ids):
        raise DataError(f"{path}: scored other probes or audit examples than the forecast's: rerun the fine-tune")
    return meta["steps"], meta["total"], nll, int(meta.get("tokens", 0))


def probe_values(scores: str, measured_ids: np.ndarray, base_nll: np.ndarray) -> tuple[np.ndarray, int]:
    """(Z at the probes and then the audit examples (`measured_ids`), the tokens scored): a probe score job's NLL
    less the base's; or, from a monitored fine-tune's checkpoint, its last check less its step 0 (the same scorer
    and settings on the weights it saved and the weights it started from: no scoring job of its own). An audit
    example without a score (an empty span) is NaN, and the bound leaves it out; a probe must have one."""
    import pyarrow.parquet as pq

    if Path(scores).is_dir():
        _, _, nll, tokens = read_probe_record(scores, measured_ids)
        return nll[-1] - nll[0], tokens
    table = pq.read_table(scores, columns=["example_id", "nll", "n_tokens"])
    tokens = int(table.column("n_tokens").to_numpy().sum())  # the items that follow the probes were scored too
    table = table.slice(0, len(measured_ids))
    ids = table.column("example_id").to_numpy().astype(str)
    if not np.array_equal(ids, measured_ids):
        raise DataError(f"{scores}: its examples are not the probes' and audit examples' ({len(ids)} vs "
                        f"{len(measured_ids)}): rescore it")
    return table.column("nll").to_numpy().astype(np.float64) - base_nll, tokens


# what forecasting adds to a method's prediction settings: a forecast starts where its fine-tune starts, so the
# matrix factorization's fold-in goes through the origin (FoldInMF's `origin`: every probe's change 0, every
# example's 0), where the prediction of a finished task's row (paper §5) keeps the paper's fold-in
FORECAST_PARAMS = {"mf": {"origin": True}}


def forecast_params(method: str, params: dict | None) -> dict:
    """A forecast's settings of `method`: FORECAST_PARAMS', under the ones given."""
    return {**FORECAST_PARAMS.get(method, {}), **(params or {})}


def fit_completion(train: np.ndarray, known: np.ndarray, method: str, params: dict, levels: list[float]):
    """(`method` fitted on the fit tasks' rows, {level: half-width per usable example}): what completes any
    row from its values at the `known` positions. The half-widths depend on the probes, not on their values,
    so one fit serves every row (a forecast job's tasks, a monitor's checks)."""
    model = make_method(method, **params).fit(train)
    if levels and not interval_capable(model, params):
        raise DataError(f"method {method!r} gives no intervals (a ranking score or side information)")
    if levels and len(train) < 3:
        log.warning("%d fit task(s): conformal intervals need at least 3 to leave one out; none written", len(train))
        levels = []
    return model, halfwidths(train, known, model, method, params, list(levels)) if levels else {}


def complete(train: np.ndarray, known: np.ndarray, values: np.ndarray, method: str, params: dict,
             levels: list[float]) -> tuple[np.ndarray, dict[float, np.ndarray]]:
    """(the forecast rows (T, usable) float32, {level: half-width per usable example}): `method` fitted on
    the fit tasks' rows folds each task in from its values at the `known` positions."""
    model, widths = fit_completion(train, known, method, params, levels)
    return model.predict(np.broadcast_to(known, values.shape), values).astype(np.float32, copy=False), widths


def forecast_command(settings: dict, matrix: str, probes: str, scores: list[str], base_scores: list[str], out: str,
                     summary: str, figure: str, item_columns: dict | None = None) -> dict:
    """`forgetmap forecast`: every forecast task's completed row with its half-widths (`out`), and per task
    what it cost and, for a task also measured, how close the forecast came (`summary`, `figure`). The
    base's score files give the tokens a full scoring of one checkpoint takes (the same for every
    checkpoint of the model: one tokenizer, one template). `item_columns`: per task, its correctness rates
    forecast from the probes' items (forgetmap.correctness.forecast.forecast_with_items), added to its line."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..io import atomic_path, read_metadata, write_table
    from ..matrix import ForgettingMatrix

    forgetting = ForgettingMatrix.read(matrix)
    forgetting.require_measured(matrix, "a forecast's map fit")
    chosen = read_metadata(probes)
    if chosen["fit_tasks"] != settings["fit_tasks"] or chosen["k"] != settings["k"]:
        raise DataError(f"{probes}: chosen for other fit tasks or another k than this forecast's: rebuild it")
    train, usable, index, known = chosen_probes(forgetting, settings["fit_tasks"], matrix, probes, chosen)
    tasks = settings["tasks"]
    if len(scores) != len(tasks):
        raise DataError(f"{len(scores)} probe score files for {len(tasks)} forecast tasks")
    audit, strata = audit_positions(chosen, train, known, usable, probes)
    both = np.concatenate([index, usable[audit]])
    measured = [probe_values(path, forgetting.example_ids[both], forgetting.base_nll[both].astype(np.float64))
                for path in scores]
    values = np.stack([v[:len(index)] for v, _ in measured])
    audited = np.stack([v[len(index):] for v, _ in measured])
    for path, row in zip(scores, values):
        if not np.isfinite(row).all():
            raise DataError(f"{path}: {int((~np.isfinite(row)).sum())} probe(s) without a score (an empty span)")
    levels = [float(level) for level in settings["intervals"]]
    model, widths = fit_completion(train, known, settings["method"], settings["params"], levels)
    pred = model.predict(np.broadcast_to(known, values.shape), values).astype(np.float32, copy=False)
    ends = studentized_ends(train, known, model, settings["method"], settings["params"], audit, strata, levels) \
        if len(audit) else None

    n = forgetting.shape[1]
    columns = {"example_id": pa.array(forgetting.example_ids.astype(str)), "source": pa.array(forgetting.sources)}
    is_probe = np.zeros(n, dtype=bool)
    is_probe[index] = True
    columns["probe"] = pa.array(is_probe)
    for t, task in enumerate(tasks):
        row = np.full(n, np.nan, dtype=np.float32)
        row[usable] = pred[t]
        columns[task] = pa.array(row, pa.float32())
    for level, width in widths.items():
        full = np.full(n, np.nan, dtype=np.float32)
        full[usable] = width
        columns[interval_column(level)] = pa.array(full, pa.float32())
    write_table(pa.table(columns), out, {
        "tasks": tasks, "method": settings["method"], "params": settings["params"], "k": settings["k"],
        "probes": chosen["probes"], "fit_tasks": settings["fit_tasks"], "levels": sorted(widths),
        "probe_ids": forgetting.example_ids[index].tolist(),
        "probe_values": {task: values[t].round(6).tolist() for t, task in enumerate(tasks)},
        "audit_ids": forgetting.example_ids[usable[audit]].tolist(),
        "audit_values": {task: audited[t].round(6).tolist() for t, task in enumerate(tasks)},
        "bound_ends": None if ends is None else {f"{level:g}": list(end) for level, end in ends.items()}})

    upstream_tokens = sum(int(pq.read_table(p, columns=["n_tokens"]).column(0).to_numpy().sum()) for p in base_scores)
    rows = [{**_task_summary(task, t, settings, forgetting, usable, known, pred, values, measured[t][1],
                             upstream_tokens, widths),
             **own_bound(pred[t], known, values[t], audit, audited[t], levels,
                         forgetting.row(task)[usable] if task in forgetting.tasks else None, ends, strata),
             **(item_columns or {}).get(task, {})} for t, task in enumerate(tasks)]
    table = pd.DataFrame(rows)
    with atomic_path(summary) as tmp:
        table.to_csv(tmp, sep="\t", index=False, float_format="%.6g")
    _figure(table, forgetting, usable, known, pred, widths, tasks, figure)
    checked = table[table["measured"]]
    return {"tasks": len(tasks), "k": settings["k"], "fit_tasks": len(settings["fit_tasks"]),
            "intervals": sorted(widths), "checked": len(checked),
            "rmse": float(checked["rmse"].mean()) if len(checked) else None}


def own_bound(row: np.ndarray, known: np.ndarray, values: np.ndarray, audit: np.ndarray, audited: np.ndarray,
              levels: list[float], truth: np.ndarray | None = None, ends: dict | None = None,
              strata: np.ndarray | None = None) -> dict:
    """A forecast row's mean over the usable examples bounded by its own audit examples at each level
    (forgetmap.predict.bound: `estimate`, `estimate_lower_{level}`, `estimate_upper_{level}`, and the audit's own
    estimate of the others' mean, `audit_mean`); with the measured row (`truth`), whether each interval holds
    its mean (`estimate_covered_{level}`). None of them without audit examples. `ends`: {level: (up, down)}, the
    interval's ends as the map's fit tasks place the truth (forgetmap.predict.ends), which the interval takes as
    the monitor's does (t's where None); `strata`: the audit's strata (forgetmap.predict.audit), None where it was
    drawn uniformly."""
    from .bound import audit_mean, mean_bound

    if len(audit) < 2 or np.isfinite(audited).sum() < 2:
        return {}
    out = {"audit_mean": audit_mean(len(row), known, audit, audited, strata)}
    for level in sorted(levels) or [0.9]:
        bound = mean_bound(row, known, values, audit, audited, level, strata=strata,
                           ends=None if ends is None else ends.get(level))
        out.update({"estimate": bound.estimate, f"estimate_lower_{level:g}": bound.lower,
                    f"estimate_upper_{level:g}": bound.upper})
        if truth is not None and np.isfinite(truth).all():
            out[f"estimate_covered_{level:g}"] = bool(bound.lower <= float(truth.mean()) <= bound.upper)
    return out


def _task_summary(task, t, settings, forgetting, usable, known, pred, values, probe_tokens, upstream_tokens,
                  widths) -> dict:
    """A forecast task's row of the summary: what was forecast and what it cost; against the measured row
    (a `check` task), the prediction metrics over the hidden usable examples and the interval coverage."""
    row = {"task": task, "mode": settings["modes"][task], "method": settings["method"], "probes": settings["probes"],
           "k": settings["k"], "fit_tasks": len(settings["fit_tasks"]),
           "forecast_mean": float(np.mean(pred[t])), "forecast_forgotten": float(np.mean(pred[t] > settings["threshold"])),
           "probe_mean": float(np.mean(values[t])), "probe_tokens": probe_tokens, "upstream_tokens": upstream_tokens,
           "token_ratio": upstream_tokens / max(probe_tokens, 1),
           "measured": task in forgetting.tasks}
    for level, width in widths.items():
        row[f"halfwidth_{level:g}"] = float(np.mean(width))
    if row["measured"]:
        truth = forgetting.row(task)[usable][None, :]
        hidden = np.isfinite(truth)
        hidden[:, known] = False
        metrics = evaluate(pred[t][None, :], truth, hidden, threshold=settings["threshold"], q=settings["top_q"],
                           budget=settings["budget"])
        row.update({name: metrics[name] for name in ("rmse", "top_q_f1", "precision_at_b", "roc_auc")})
        for level, width in widths.items():
            row[f"coverage_{level:g}"], _ = coverage(pred[t][None, :], truth, hidden, width)
    return row


def _figure(table, forgetting, usable, known, pred, widths, tasks, out) -> None:
    """Per forecast task: the forecast row against the measured one where it was measured (the probes
    marked), else its forecast sorted with the interval band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..io import atomic_path

    level = max(widths) if widths else None
    cols = min(3, len(tasks))
    rows = -(-len(tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for t, task in enumerate(tasks):
        ax = axes[t // cols][t % cols]
        if task in forgetting.tasks:
            truth = forgetting.row(task)[usable]
            ax.scatter(truth, pred[t], s=4, alpha=0.4, color="tab:blue", label="hidden examples")
            ax.scatter(truth[known], pred[t][known], s=14, color="tab:red", label="probes")
            lo, hi = float(np.nanmin(truth)), float(np.nanmax(truth))
            ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
            ax.set_xlabel("measured Z")
            ax.set_ylabel("forecast Z")
            rmse = table.loc[t, "rmse"] if "rmse" in table else float("nan")
            ax.set_title(f"{task} (measured; RMSE {rmse:.3f})", fontsize=9)
        else:
            order = np.argsort(pred[t])
            ax.plot(pred[t][order], color="tab:blue", lw=1, label="forecast")
            if level is not None:
                band = widths[level][order]
                ax.fill_between(np.arange(len(order)), pred[t][order] - band, pred[t][order] + band, color="tab:blue",
                                alpha=0.2, label=f"{level:g} interval")
            ax.set_xlabel("upstream examples, by forecast")
            ax.set_ylabel("forecast Z")
            ax.set_title(f"{task} (forecast only)", fontsize=9)
        ax.legend(fontsize=7)
    for extra in range(len(tasks), rows * cols):
        axes[extra // cols][extra % cols].axis("off")
    fig.suptitle(f"Forecast rows from k = {len(known)} probes", fontsize=10)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
