"""Forecast trajectories: the monitor inside forgetmap's own fine-tunes (`finetune.monitor`).

A forecast task's fine-tune scores the forecast's k probes and its audit examples on its live weights at step
0, at each check and at its last step (`ProbeChecks`, through the same `ProbeMeter` as the trainer callback),
and leaves their NLL per check in its checkpoint (`monitor.parquet`). The trajectory job completes each
check's change since step 0 into a whole row with the forecast job's completion and intervals, and bounds the
row's mean by the check's own audit examples (forgetmap.predict.bound, as the trainer callback bounds it); for
a `check` task it scores every check against the task's measured final row, beside the naive monitor that
takes the probes' mean change as every example's forgetting (`trajectory.tsv`, `trajectory.png`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError
from ..predict.forecast import PROBE_RECORD, read_probe_record


def check_steps(monitor: dict, total: int) -> list[int]:
    """The optimizer steps after which the probes are scored: every `every`, each share in `at`, the last."""
    steps = {total}
    if monitor.get("every"):
        steps.update(range(monitor["every"], total + 1, monitor["every"]))
    steps.update(max(1, round(share * total)) for share in monitor.get("at") or [])
    return sorted(steps)


class ProbeChecks:
    """The probes scored at step 0 (now) and after each check step; `on_step` is `train()`'s per-step hook."""

    def __init__(self, model, tokenizer, probes: str, monitor: dict, total: int, autocast):
        import pandas as pd

        from ..meter import ProbeMeter

        from ..io import read_metadata

        rows = pd.read_parquet(probes)
        record = read_metadata(probes)  # the forecast's probes and audit examples, not the items that follow them
        if "indices" in record:
            rows = rows.iloc[:len(record["indices"]) + len(record.get("audit", []))]
        self.ids = rows["example_id"].astype(str).tolist()
        self.meter = ProbeMeter.for_rows(model, tokenizer, rows, monitor["chat_template"], monitor["max_length"],
                                         monitor["token_budget"], autocast)
        self.steps = check_steps(monitor, total)
        self.total = total
        self.nll = [self.meter.measure()]
        self.baseline_seconds = self.seconds = self.meter.seconds

    def on_step(self, step: int) -> dict:
        if step not in self.steps:
            return {}
        self.nll.append(self.meter.measure())
        self.seconds += self.meter.seconds
        return {"probe_forgetting": round(float(np.nanmean(self.nll[-1] - self.nll[0])), 6)}

    def write(self, into: Path | None) -> dict:
        """The probes' NLL per check into `into` (None: another rank's, which writes nothing); the summary's lines."""
        import pyarrow as pa

        from ..io import write_table

        if into is not None:
            columns = {"example_id": pa.array(self.ids)}
            for step, nll in zip([0, *self.steps], self.nll):
                columns[f"step_{step}"] = pa.array(nll, pa.float64())
            write_table(pa.table(columns), Path(into) / PROBE_RECORD,
                        {"steps": [0, *self.steps], "total": self.total, "tokens": self.meter.tokens})
        return {"monitor_checks": len(self.steps), "monitor_seconds": round(self.seconds, 3),
                "monitor_baseline_seconds": round(self.baseline_seconds, 3),
                "monitor_tokens_per_check": self.meter.tokens, "monitor_parallelism": self.meter.kind}


def trajectory_command(settings: dict, matrix: str, probes: str, checkpoints: list[str], out: str,
                       figure: str, transitions: str | None = None, base_scores: list[str] | None = None) -> dict:
    """`forgetmap forecast-trajectory`: one line per monitored task and check (`out`), and the figure. With the
    transitions file of a corpus with items and the base's score files, each line also holds the watched items'
    accuracy, F and BT (forgetmap.monitor.item_trajectory), and the figure their F."""
    import pandas as pd

    from ..io import atomic_path, read_metadata
    from ..matrix import ForgettingMatrix
    from ..predict.conformal import fold_mean_errors, mean_halfwidths
    from ..predict.ends import studentized_ends
    from ..predict.audit import audit_positions
    from ..predict.forecast import chosen_probes, fit_completion, own_bound
    from ..predict.metrics import evaluate

    forgetting = ForgettingMatrix.read(matrix)
    chosen = read_metadata(probes)
    train, usable, index, known = chosen_probes(forgetting, settings["fit_tasks"], matrix, probes, chosen)
    audit, strata = audit_positions(chosen, train, known, usable, probes)
    measured_ids = forgetting.example_ids[np.concatenate([index, usable[audit]])]
    if len(checkpoints) != len(settings["tasks"]):
        raise DataError(f"{len(checkpoints)} fine-tunes for {len(settings['tasks'])} monitored tasks")
    completion, widths = fit_completion(train, known, settings["method"], settings["params"],
                                        [float(v) for v in settings["intervals"]])
    level = max(widths) if widths else None
    # the mean's conformal half-widths from the folds and, with audit examples, the bound's ends (predict.ends)
    errors = fold_mean_errors(train, known, completion, settings["method"], settings["params"]) if widths else ()
    mean_widths = mean_halfwidths(errors, sorted(widths)) if widths else {}
    hidden = np.ones(len(usable), dtype=bool)
    hidden[known] = False
    lines, drawn = [], {}
    shown = level if level is not None else 0.9  # the level the run's own bound and the items are given at
    ends = studentized_ends(train, known, completion, settings["method"], settings["params"], audit, strata,
                            [shown]) if len(audit) else None
    items, items_drawn = ({}, {}) if transitions is None else \
        _item_lines(transitions, probes, base_scores or [], settings, checkpoints, shown)
    for task, checkpoint in zip(settings["tasks"], checkpoints):
        steps, total, nll, _ = read_probe_record(checkpoint, measured_ids)
        changes = nll[1:] - nll[0]
        values, audited = changes[:, :len(index)], changes[:, len(index):]
        pred = completion.predict(np.broadcast_to(known, values.shape), values).astype(np.float32)
        truth = forgetting.row(task)[usable] if task in forgetting.tasks else None
        # each check's bound from its audit examples; the last check's weights are the measured row's
        bounds = [own_bound(pred[c], known, values[c], audit, audited[c], [shown],
                            truth if step == total else None, ends, strata) for c, step in enumerate(steps[1:])]
        drawn[task] = (steps[1:], total, pred, values, truth, bounds)
        for c, step in enumerate(steps[1:]):
            line = {"task": task, "step": step, "fraction": step / total, "forecast_mean": float(pred[c].mean()),
                    "forecast_forgotten": float(np.mean(pred[c] > settings["threshold"])),
                    "probe_mean": float(values[c].mean())}
            if level is not None:  # the mean's conformal interval from the fit tasks, the same at every check
                line[f"forecast_upper_{level:g}"] = float(pred[c].mean()) + mean_widths[level]
            line.update(bounds[c])  # and its bound from this check's audit examples
            if truth is not None:
                _score_check(line, pred[c], values[c], truth, hidden & np.isfinite(truth), widths, settings, evaluate)
                for lvl, width in mean_widths.items():
                    line[f"mean_covered_{lvl:g}"] = bool(line["mean_error"] <= width)
            line.update(items.get((task, step), {}))
            lines.append(line)
    table = pd.DataFrame(lines)
    with atomic_path(out) as tmp:
        table.to_csv(tmp, sep="\t", index=False, float_format="%.6g")
    _figure(drawn, mean_widths, level, hidden, figure, items_drawn)
    final = table.groupby("task").tail(1)
    return {"tasks": len(settings["tasks"]), "checks": len(table),
            **({"final_rmse": float(final["rmse"].mean()), "final_naive_rmse": float(final["naive_rmse"].mean())}
               if "rmse" in table else {})}


def _item_lines(transitions: str, probes: str, base_scores: list[str], settings: dict, checkpoints: list[str],
                level: float):
    from .item_trajectory import item_lines

    return item_lines(transitions, probes, base_scores, settings, checkpoints, level)


def _score_check(line: dict, pred, values, truth, hidden, widths, settings, evaluate) -> None:
    """A check against the task's measured final row over the examples that are not probes: the forecast's
    RMSE, top-q F1, interval coverage and error on the mean, and the naive monitor's (the probes' mean
    change as every example's value)."""
    metrics = evaluate(pred[None, :], truth[None, :], hidden[None, :], threshold=settings["threshold"],
                       q=settings["top_q"], budget=settings["budget"])
    measured = float(truth[hidden].mean())
    naive = float(values.mean())
    line.update(measured_mean=measured, rmse=metrics["rmse"], top_q_f1=metrics["top_q_f1"],
                mean_error=abs(float(pred[hidden].mean()) - measured),
                naive_rmse=float(np.sqrt(np.mean((truth[hidden] - naive) ** 2))), naive_mean_error=abs(naive - measured))
    for level, width in widths.items():
        line[f"coverage_{level:g}"] = float(np.mean(np.abs(truth[hidden] - pred[hidden]) <= width[hidden]))


def _figure(drawn: dict, widths: dict, level, hidden: np.ndarray, out: str, items: dict | None = None) -> None:
    """Left: one task's mean forecast over training (the first measured task, else the first) with the estimate
    and its interval from each check's audit examples (without audit examples, the mean's constant interval:
    `widths`, level -> its half-width), the naive monitor's probe mean and, where measured, the final row's
    mean. Then (measured tasks): RMSE against the final row at each check over
    the examples that are not probes, forecast and naive monitor. Last, where items are watched: one task's F
    over its steps (forgetmap.monitor.item_trajectory.draw_items)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..io import atomic_path

    measured = [t for t, d in drawn.items() if d[4] is not None]
    task = (measured or list(drawn))[0]
    steps, total, pred, values, truth, bounds = drawn[task]
    fractions = np.asarray(steps) / total
    panels = 1 + bool(measured) + bool(items)
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels + 0.2, 3.8), squeeze=False)
    ax = axes[0][0]
    means = pred.mean(1)
    ax.plot(fractions, means, marker="o", color="tab:blue", label="forecast mean")
    shown = level if level is not None else 0.9
    if all(bounds):  # the run's own bound: the estimate and its interval from each check's audit examples
        ax.plot(fractions, [b["estimate"] for b in bounds], marker=".", color="tab:green",
                label="estimate (audit examples)")
        ax.fill_between(fractions, [b[f"estimate_lower_{shown:g}"] for b in bounds],
                        [b[f"estimate_upper_{shown:g}"] for b in bounds], color="tab:green", alpha=0.15,
                        label=f"its {shown:g} interval")
    elif level is not None and np.isfinite(widths[level]):
        ax.fill_between(fractions, means - widths[level], means + widths[level], color="tab:blue", alpha=0.15,
                        label=f"the mean's {level:g} interval")
    ax.plot(fractions, values.mean(1), marker="s", color="tab:orange", label="probes' mean (naive)")
    if truth is not None:
        ax.axhline(float(np.nanmean(truth)), color="black", ls="--", lw=1, label="measured final row's mean")
    ax.set_xlabel("share of training steps")
    ax.set_ylabel("Z (nats per token)")
    ax.set_title(f"{task}: forecast while training", fontsize=9)
    ax.legend(fontsize=7)
    if measured:
        ax = axes[0][1]
        for name in measured:
            steps, total, pred, values, truth, _ = drawn[name]
            mask = hidden & np.isfinite(truth)
            fr = np.asarray(steps) / total
            ax.plot(fr, [np.sqrt(np.mean((p[mask] - truth[mask]) ** 2)) for p in pred], color="tab:blue",
                    alpha=0.6, label="forecast" if name == measured[0] else None)
            ax.plot(fr, [np.sqrt(np.mean((v.mean() - truth[mask]) ** 2)) for v in values], color="tab:orange",
                    alpha=0.6, ls="--", label="naive monitor" if name == measured[0] else None)
        ax.set_xlabel("share of training steps")
        ax.set_ylabel("RMSE against the final row")
        ax.set_title("every measured task", fontsize=9)
        ax.legend(fontsize=7)
    if items:
        from .item_trajectory import draw_items

        draw_items(axes[0][-1], items, {t: d[1] for t, d in drawn.items()},
                   level if level is not None else 0.9)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
