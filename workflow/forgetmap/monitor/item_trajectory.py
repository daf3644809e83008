"""The items a monitored fine-tune watches in forgetmap's own workflow (`finetune.monitor` on a corpus with
items): k items of the corpus, drawn at random, scored right or wrong at each check (`ItemChecks`: options packed
as the score jobs pack them; with `forecast.generated`, free-form items too, answered greedily as the score jobs
answer them), left in the checkpoint (`monitor-items.parquet`); the trajectory job forecasts every item's chance of
being right at each check through the correctness map of the fit tasks (their rows of the transitions file), and
so the accuracy, F and BT with their intervals beside the NLL's forecast (`item_lines`), against a `check` task's
measured final rates.

The items are asked as the score jobs ask them (the model's correctness settings), and F and BT are counted
against the base's correctness from its score jobs (the transitions file's before), as the transitions job counts
them (so the items are not scored at step 0: the base's score jobs already did). Without `forecast.generated` the
rates are over the multiple-choice items alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError
from ..predict.forecast import ITEM_RECORD, chosen_items, read_item_record


class ItemChecks:
    """k items of the corpus scored right or wrong after each check step."""

    def __init__(self, model, tokenizer, shards: list[str], items: dict, steps: list[int], autocast):
        from ..correctness.benchmark import from_frame
        from ..meter import OptionMeter

        generated = items["generated"]
        population, self.known = chosen_items(shards, items["k"], items["seed"], generated)  # the probes' items too
        self.steps, self.values, self.seconds = steps, [], 0.0
        self.benchmark = None
        if not len(population):  # a corpus whose items all have free-form answers, not watched: nothing to watch
            return
        self.benchmark = from_frame(population, tokenizer, items["asked"], "the corpus's items", generate=generated)
        if len(self.benchmark) != len(population):
            raise DataError(f"{len(population) - len(self.benchmark)} of the corpus's items cannot be asked as the "
                            f"score jobs ask them")
        self.meter = OptionMeter.for_items(model, tokenizer, self.benchmark, self.known,
                                           token_budget=items["asked"]["token_budget"], autocast=autocast)

    def _decide(self) -> np.ndarray:
        return self.benchmark.decide(self.meter.measure(), self.known)

    def on_step(self, step: int) -> dict:
        if self.benchmark is None or step not in self.steps:
            return {}
        self.values.append(self._decide())
        self.seconds += self.meter.seconds
        return {"items_accuracy": round(float(np.mean(self.values[-1])), 6)}

    def write(self, into: Path | None) -> dict:
        """The k items' 0/1 per check into `into` (None: another rank's), with the population they were drawn from
        (every item and its number of options, 0 for free form); the summary's lines."""
        import pyarrow as pa

        from ..io import write_table

        if self.benchmark is None:
            return {}
        if into is not None:
            columns = {"item_id": pa.array(self.benchmark.ids[self.known].astype(str))}
            for step, values in zip(self.steps, self.values):
                columns[f"step_{step}"] = pa.array(values, pa.int8())
            write_table(pa.table(columns), Path(into) / ITEM_RECORD,
                        {"steps": self.steps, "population": self.benchmark.ids.astype(str).tolist(),
                         "options": self.benchmark.options.tolist(), "metric": self.benchmark.metric})
        return {"monitor_items": len(self.known), "monitor_items_seconds": round(self.seconds, 3)}


def item_lines(transitions: str, probes: str, base_scores: list[str], settings: dict, checkpoints: list[str],
               level: float) -> tuple[dict, dict]:
    """({(task, step): the check's item columns}, {task: what the figure draws}): each monitored fine-tune's item
    checks forecast through the fit tasks' correctness (forgetmap.correctness.forecast.ItemRates) at `level`,
    against the base's correctness from its score files, a `check` task's last check beside its measured rates;
    none where the corpus has no multiple-choice item (the probes file records none)."""
    from ..correctness.forecast import ItemRates, base_correctness, measured_columns
    from ..io import read_metadata

    record = read_metadata(probes).get("items")
    if not record:
        return {}, {}
    rates = ItemRates(transitions, settings["fit_tasks"], record["population"], record["options"],
                      "the probes' population")
    if rates.model is None:
        return {}, {}
    before = base_correctness(base_scores, rates.population.tolist())
    if not np.isfinite(before).all():
        raise DataError(f"the base's score files leave {int((~np.isfinite(before)).sum())} of the watched items' "
                        f"population unscored: rescore the base")
    lines, drawn = {}, {}
    for task, checkpoint in zip(settings["tasks"], checkpoints):
        steps, scored, values, population, _ = read_item_record(checkpoint)
        if not np.array_equal(population, rates.population):
            raise DataError(f"{checkpoint}: watched items drawn from another population than the probes' items: "
                            f"rerun the fine-tune")
        known = rates.positions(scored)
        truth = rates.after(task)
        series = []
        for c, step in enumerate(steps):
            line, found, naive = rates.line(known, values[c], before, level)
            if truth is not None and step == steps[-1]:  # the fine-tune's last check is the weights it saved
                line.update(measured_columns(before, truth))
            lines[(task, step)] = line
            series.append((step, found["F"], naive["F"]))
        drawn[task] = (series, None if truth is None else float(np.mean(before * (1 - truth))))
    return lines, drawn


def draw_items(ax, drawn: dict, total_of: dict, level: float) -> None:
    """One task's F over its steps: the forecast with its interval, the naive estimate, the measured F at its end
    (the first task with a measured row, else the first)."""
    measured = [t for t, (_, truth) in drawn.items() if truth is not None]
    task = (measured or list(drawn))[0]
    series, truth = drawn[task]
    fractions = np.array([s for s, _, _ in series]) / total_of[task]
    estimate = np.array([f.estimate for _, f, _ in series])
    ax.plot(fractions, estimate, marker="o", color="tab:blue", label="forecast F (the map, k items)")
    ax.fill_between(fractions, [f.lower for _, f, _ in series], [f.upper for _, f, _ in series], color="tab:blue",
                    alpha=0.15, label=f"its {level:g} interval")
    ax.plot(fractions, [n.estimate for _, _, n in series], marker="s", color="tab:orange",
            label="the k items' own (naive)")
    if truth is not None:
        ax.plot([fractions[-1]], [truth], marker="*", ms=12, color="black", ls="none", label="measured at the end")
    ax.set_xlabel("share of training steps")
    ax.set_ylabel("F (right at step 0, wrong now)")
    ax.set_title(f"{task}: the items' forgetting while training", fontsize=9)
    ax.legend(fontsize=7)
