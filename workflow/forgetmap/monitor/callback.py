"""`ForgettingMonitor`: a transformers `TrainerCallback` (TRL's trainers subclass `Trainer`, so they take it
unchanged) that forecasts every upstream example's forgetting while a fine-tune runs.

At `on_train_begin` it scores the map's k probes once (the baseline); at each check, at `on_evaluate`
(following `eval_strategy`/`eval_steps`) or every `every` steps, it scores them again, folds the change
into the map's completion (the forecast job's own) and so forecasts the whole row with its conformal
half-widths. Each check:

- adds `eval_forget_*` scalars to the evaluation's metrics (so `metric_for_best_model` can name one) and,
  through the trainer it is attached to, logs them to every `report_to` backend;
- writes its forecast row (example id, forecast, half-widths) as parquet under
  `output_dir/forgetmap-monitor/` (and a line of `trajectory.tsv`), on the main process;
- bounds the mean forgetting at that check from the run itself: the map's audit examples, drawn at random by
  strata (forgetmap.predict.audit) and scored beside the probes, correct the forecast's mean and give its interval
  (forgetmap.predict.bound);
- at a `budget` (that interval's upper end above it for `patience` checks in a row) saves and stops
  training, as `EarlyStoppingCallback` does; with a `replay` (forgetmap.monitor.replay.ForecastReplay, mixed
  into the training set), each check points the replay's draw at the examples forecast most forgotten, a
  check over the budget raises the replayed share instead, and training stops only once the share is at its
  ceiling.

With `items` (forgetmap.monitor.items.ItemWatch) it also watches a benchmark's items: every item scored at the
baseline, k of them at each check, each item's chance of being right now forecast through a correctness map, and
the benchmark's accuracy, F and BT logged with their intervals (`eval_forget_items_*`) beside the NLL's; each
check's per-item forecast is written as `items-STEP.parquet`, and a budget may name an accuracy drop or an F rate.

Without a map it is the naive monitor: the probes' mean NLL change, no forecast, no budget. Its state (the
baseline, the checks so far) is saved with each checkpoint and comes back on resume. Under DDP, FSDP or
DeepSpeed ZeRO-3 every rank scores its share of the examples through the model as the trainer wrapped it, and
every rank holds every value (forgetmap.meter).
"""

from __future__ import annotations

import logging
import time
import weakref
from pathlib import Path

import numpy as np
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from ..errors import DataError
from ..predict.bound import audit_mean, mean_bound, share_bound
from .map import ForecastMap, differences, identity

log = logging.getLogger(__name__)

OUTPUT = "forgetmap-monitor"
PREFIX = "eval_forget_"
# the median gap (nats per token) between the baseline and the map's base NLL at the measured examples beyond
# which the map is another model's: bf16 against fp32 or a GPU against a CPU moves the median by 2e-4 to 3e-3
# (the tests' stand-ins; an H200 at 1B), a sibling trained from other weights by 0.02-0.055 (the stand-ins)
BASE_TOLERANCE = 0.01
# the arguments a framework's settings give by name (ForgettingMonitor.from_settings)
SETTINGS = ("budget", "patience", "level", "every", "token_budget", "base_tolerance", "write_rows")
_ATTACHED: dict[int, weakref.ref] = {}  # id(TrainingArguments) -> its trainer: survives a resume's new instance


class ForgettingMonitor(TrainerCallback, ExportableState):
    """`map`: a forecast map file (or a `ForecastMap`); `probes`: for the naive monitor without a map, the
    upstream rows to measure (a parquet file or a frame with the upstream columns). `budget`: mean forgetting
    (nats per token) whose upper bound at `level` (predict.bound, from the map's audit examples; a map without
    them: the forecast's mean plus the map's constant half-width) may not be exceeded for `patience` checks.
    `replay`: a `ForecastReplay` the monitor steers (needs a map). `every`: check every N optimizer steps instead
    of at each evaluation. `token_budget`: padded tokens per scoring batch (the memory bound). `base_tolerance`:
    the largest median gap (nats per token) between the baseline and the map's base NLL at the measured examples
    before the map is judged another model's (None: monitored anyway, and the log says so). `items`: a benchmark's
    items to watch too (an `ItemWatch`), with or without a forecast map of the upstream examples."""

    def __init__(self, map: str | ForecastMap | None = None, *, probes=None, budget: float | None = None,
                 patience: int = 1, level: float | None = None, every: int | None = None, token_budget: int = 4096,
                 base_tolerance: float | None = BASE_TOLERANCE, write_rows: bool = True, replay=None, items=None):
        if map is None and probes is None and items is None:
            raise ValueError("ForgettingMonitor: give a forecast map (map=) or, for the naive monitor, the probes "
                              "to measure (probes=), or a benchmark's items to watch (items=ItemWatch(...))")
        if map is not None and probes is not None:
            raise ValueError("ForgettingMonitor: give map= or probes=, not both (a map carries its probes)")
        if budget is not None and map is None:
            raise ValueError("ForgettingMonitor: a budget acts on the forecast's upper bound, and a forecast needs "
                              "a map (map=); the naive monitor (probes=) only measures its probes")
        if replay is not None and map is None:
            raise ValueError("ForgettingMonitor: a replay draws the examples the forecast says are most forgotten, "
                              "and a forecast needs a map (map=)")
        if patience < 1:
            raise ValueError(f"ForgettingMonitor: patience must be at least 1, not {patience}")
        if every is not None and every < 1:
            raise ValueError(f"ForgettingMonitor: every must be at least 1 step, not {every}")
        self.map = map if isinstance(map, ForecastMap) or map is None else ForecastMap.read(map)
        if self.map is not None:
            levels = self.map.levels
            if level is None and levels:
                level = max(levels)
            if level is not None and level not in levels:
                raise ValueError(f"ForgettingMonitor: level {level} is not one of the map's interval levels {levels}")
            if budget is not None and level is None:
                raise ValueError("ForgettingMonitor: a budget needs an interval level; the map has none")
        self.probes = None if probes is None else _probe_rows(probes)
        if isinstance(probes, (str, Path)):
            self._probes_file = str(probes)
        self.budget, self.patience, self.level, self.every = budget, patience, level, every
        self.token_budget, self.base_tolerance, self.write_rows = token_budget, base_tolerance, write_rows
        self.replay = replay
        self.items = items
        self.trainer = None
        # the state a resume brings back (ExportableState)
        self.baseline: list[float] | None = None
        self.checks: list[dict] = []
        self.over = 0
        self.replay_share: float | None = None
        self.item_baseline: list[int] | None = None  # every item right (1) or wrong (0) at the baseline
        self.item_known: list[int] | None = None     # the items scored at each check
        self.item_baseline_margins: list[float] | None = None  # every item's option margin there (estimate='margins')
        self.meter = None
        self.item_meter = None

    @classmethod
    def from_settings(cls, settings, items=None) -> "ForgettingMonitor":
        """The monitor from a framework's settings object (OLMo-core's callback config, Axolotl's `forgetmap:`
        block): its attributes named as this class's arguments; `items` an `ItemWatch` or None."""
        return cls(settings.map, probes=settings.probes, items=items,
                   **{name: getattr(settings, name) for name in SETTINGS})

    # --- wiring ---------------------------------------------------------------------------------------

    def attach(self, trainer) -> "ForgettingMonitor":
        """Add the monitor to `trainer` and log its scalars through it (to every `report_to` backend);
        without, they reach the evaluation's metrics only."""
        if self.replay is not None:
            self.replay.wrap(trainer, self.map)  # after the trainer prepared (tokenized, packed) its training set
        trainer.add_callback(self)
        self.trainer = trainer
        _ATTACHED[id(trainer.args)] = weakref.ref(trainer)
        return self

    def state(self) -> dict:
        return {"args": {"map": self._map_path(), "probes": None if self.map is not None else self._probes_path(),
                         "budget": self.budget, "patience": self.patience, "level": self.level, "every": self.every,
                         "token_budget": self.token_budget, "base_tolerance": self.base_tolerance,
                         "write_rows": self.write_rows},
                "attributes": {"baseline": self.baseline, "checks": self.checks, "over": self.over,
                               "replay_share": self.replay_share, "item_baseline": self.item_baseline,
                               "item_known": self.item_known, "item_baseline_margins": self.item_baseline_margins}}

    def restore(self, attributes: dict) -> None:
        """A checkpoint's state (`state()["attributes"]`) back: the baseline, the checks so far, the replay's share."""
        for key, value in attributes.items():
            setattr(self, key, value)

    def _map_path(self) -> str | None:
        return None if self.map is None else self.map.path

    def _probes_path(self) -> str | None:
        return getattr(self, "_probes_file", None)

    def _trainer(self, args):
        if self.trainer is not None:
            return self.trainer
        ref = _ATTACHED.get(id(args))
        return ref() if ref is not None else None

    # --- events ---------------------------------------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, processing_class=None, optimizer=None, **kwargs):
        out = Path(args.output_dir) / OUTPUT
        tokenizer = getattr(processing_class, "tokenizer", processing_class)
        if tokenizer is None:
            raise ValueError("ForgettingMonitor: the trainer has no tokenizer (processing_class) to encode the probes")
        if self.map is not None:
            seen = identity(model, tokenizer)
            found = differences(self.map.facts, seen)
            if found:
                raise DataError(f"{self.map.path or 'the forecast map'}: a map of another model: " + "; ".join(found))
            if self.map.path is None and state.is_world_process_zero:  # a resume rebuilds the monitor from a file
                self.map.write(out / "map.parquet")
            self.map.path = str(out / "map.parquet") if self.map.path is None else self.map.path
        elif self.probes is not None and self._probes_path() is None and state.is_world_process_zero:
            from ..io import write_table
            import pyarrow as pa

            self._probes_file = str(out / "probes.parquet")
            write_table(pa.Table.from_pandas(self.probes, preserve_index=False), self._probes_file)
        self._find_replay(args)
        if self.baseline is None and self.item_baseline is None:
            stored = checkpointed(state.stateful_callbacks)
            if state.global_step > 0 and stored:  # resumed, the callback kept: its state from the checkpoint
                self.restore(stored)
        if self.replay is not None:
            if self.replay_share is None:
                self.replay_share = self.replay.share
            self.replay.share = self.replay_share  # a resume's share is the checkpoint's
        if self.map is not None or self.probes is not None:
            self._begin_probes(args, model, tokenizer, optimizer)
        if self.items is not None:
            self._begin_items(args, model, tokenizer, optimizer)

    def _begin_probes(self, args, model, tokenizer, optimizer) -> None:
        rows = self.map.measured_rows() if self.map is not None else self.probes
        scoring = self.map.scoring if self.map is not None else {"chat_template": "auto", "max_length": 2048}
        self.meter = _meter(model, tokenizer, rows, scoring, self.token_budget, args, optimizer)
        if self.meter.empty:
            raise DataError(f"probe example(s) {', '.join(map(str, self.meter.empty[:5]))} have nothing to score "
                            f"under this tokenizer and max_length {scoring['max_length']}")
        if self.map is not None and self.level is not None:
            self.map.mean_halfwidth(self.level)  # the completion, its intervals and its folds, before the first step
        if self.baseline is None:
            self.baseline = self.meter.measure().tolist()
            self._check_base(np.asarray(self.baseline))
            log.info("forgetting monitor: baseline of %d probes (%d tokens) in %.2f s", self.meter.count,
                     self.meter.tokens, self.meter.seconds)

    def _begin_items(self, args, model, tokenizer, optimizer) -> None:
        """The benchmark's items: tokenised, placed in the item map, every one scored at the baseline (a resume
        keeps the checkpoint's baseline and items), the k a check scores chosen."""
        watch = self.items
        watch.prepare(tokenizer, self.item_level, self.item_known)
        self.item_known = watch.known.tolist()
        benchmark = watch.benchmark
        if self.item_baseline is None:
            started = time.perf_counter()
            every = _meter(model, tokenizer, None, None, self.token_budget, args, optimizer, benchmark)
            measured = every.measure()
            before = benchmark.decide(measured)
            watch.check_base(before)
            self.item_baseline = before.tolist()
            if watch.estimate == "margins":
                self.item_baseline_margins = benchmark.margins(measured).tolist()
            log.info("forgetting monitor: baseline of %d items of %s (accuracy %.3f) in %.2f s; %d scored at each "
                     "check%s", len(benchmark), benchmark.describe(), before.mean(), time.perf_counter() - started,
                     len(watch.known), "" if watch.map is None else f", forecast through {watch.map.path or 'the item map'}")
        if watch.estimate == "margins":
            if self.item_baseline_margins is None:
                raise DataError("forgetting monitor: the checkpoint resumed from kept no baseline margins of the items "
                                "(its run watched them with estimate='completion'): resume it with that estimate")
            watch.calibrate(np.asarray(self.item_baseline_margins), np.asarray(self.item_baseline, dtype=np.float64),
                            self.item_level)
        self.item_meter = _meter(model, tokenizer, None, None, self.token_budget, args, optimizer, benchmark,
                                 watch.known)

    @property
    def item_level(self) -> float:
        """The level of the items' intervals: the monitor's, or 0.9 without a map's levels."""
        return self.level if self.level is not None else 0.9

    def on_step_end(self, args, state, control, **kwargs):
        if self.every is not None and state.global_step % self.every == 0:
            self._check(args, state, control, None)

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self.every is None:
            self._check(args, state, control, metrics)

    # --- a check --------------------------------------------------------------------------------------

    def _check(self, args, state, control, metrics: dict | None) -> None:
        if self.meter is None and self.item_meter is None:
            return  # before training began
        if self.checks and self.checks[-1]["step"] == state.global_step:  # another evaluation set, same weights
            if metrics is not None:
                metrics.update({k: v for k, v in self.checks[-1].items() if k.startswith(PREFIX)})
            return
        scalars, over, forecast = {}, [], None
        if self.meter is not None:
            forecast = self._check_probes(scalars, over)
        if self.item_meter is not None:
            over += self._check_items(args, state, scalars)
        stop = self._over_budget(over, state.global_step)
        if self.replay is not None and forecast is not None:
            scalars["replay_share"] = self.replay_share = self.replay.share
        if forecast is not None and self.write_rows and state.is_world_process_zero:
            self._write_row(args, state, *forecast, scalars)
        scalars = {PREFIX + name: value for name, value in scalars.items()}
        self.checks.append({"step": state.global_step, "epoch": state.epoch, **scalars})
        if state.is_world_process_zero:
            _write_trajectory(Path(args.output_dir) / OUTPUT / "trajectory.tsv", self.checks)
        if metrics is not None:
            metrics.update(scalars)
        trainer = self._trainer(args)
        if trainer is not None:
            trainer.log(dict(scalars))
        if stop:
            control.should_save = True
            control.should_training_stop = True

    def _check_probes(self, scalars: dict, over: list[str]) -> tuple | None:
        """The probes' check: their change, the forecast and its bound into `scalars`, the budget exceeded (in
        words) into `over`; the forecast's row, half-widths and measured values for its file (None without a
        map)."""
        measured = self.meter.measure() - np.asarray(self.baseline)
        k = self.map.k if self.map is not None else len(measured)
        values, audited = measured[:k], measured[k:]  # the probes, then the audit examples
        scalars.update(probe_mean=float(np.mean(values)), seconds=self.meter.seconds)
        if self.map is None:
            return None
        started = time.perf_counter()
        row, widths = self.map.forecast(values)
        # the forecast's own values under their own names; the headline (`mean`, `over_budget`) is what its
        # interval bounds: the forecast corrected by the audit examples where the check has them
        scalars["forecast_mean"] = scalars["mean"] = float(np.mean(row))
        scalars["forecast_forgotten"] = float(np.mean(row > 0))
        if len(audited):
            scalars["audit_mean"] = audit_mean(len(row), self.map.known, self.map.audit, audited, self.map.strata)
        if self.level is not None and len(audited):  # the run's own bound (predict.bound)
            bound = mean_bound(row, self.map.known, values, self.map.audit, audited, self.level,
                               ends=self.map.bound_ends(self.level), strata=self.map.strata)
            scalars.update(mean=bound.estimate, lower=bound.lower, upper=bound.upper)
        elif self.level is not None:  # a map without audit examples: the forecast's mean, its constant half-width
            halfwidth = self.map.mean_halfwidth(self.level)
            scalars.update(lower=scalars["mean"] - halfwidth, upper=scalars["mean"] + halfwidth)
        if self.budget is not None:
            scalars["forecast_over_budget"] = scalars["over_budget"] = float(np.mean(row > self.budget))
            if self.level is not None and len(audited):  # a bound on that share too, as on the mean
                share = share_bound(row, self.map.known, values, self.map.audit, audited, self.budget, self.level,
                                    strata=self.map.strata)
                scalars.update(over_budget=share.estimate, over_budget_lower=share.lower,
                               over_budget_upper=share.upper)
            if scalars["upper"] > self.budget:
                over.append(f"forecast upper bound {scalars['upper']:.4f} above the budget {self.budget}")
        if self.replay is not None:
            self.replay.follow(row)
        scalars["seconds"] += time.perf_counter() - started
        return row, widths, values, audited

    def _check_items(self, args, state, scalars: dict) -> list[str]:
        """The items' check: k items scored, every item forecast, the rates bounded; the budgets exceeded."""
        watch = self.items
        started = time.perf_counter()
        measured = self.item_meter.measure()
        values = watch.benchmark.decide(measured, watch.known)
        before = np.asarray(self.item_baseline, dtype=np.float64)
        margins = None if watch.estimate != "margins" else \
            (np.asarray(self.item_baseline_margins), watch.benchmark.margins(measured, watch.known))
        row, rates = watch.rates(values, before, self.item_level, margins)
        found = watch.scalars(rates, before)
        found["items_seconds"] = time.perf_counter() - started
        scalars.update(found)
        if self.write_rows and state.is_world_process_zero:
            from ..io import write_table

            write_table(watch.frame(row, values, before, self.item_level),
                        Path(args.output_dir) / OUTPUT / f"items-{state.global_step:08d}.parquet",
                        {"step": state.global_step, "epoch": state.epoch, "level": self.item_level, **watch.record(),
                         "budget": watch.budget, "scalars": found})
        return watch.over_budget(found)

    def _over_budget(self, over: list[str], step: int) -> bool:
        """Whether to stop: a budget exceeded (`over`: which, in words) for `patience` checks in a row, the replay
        (if any) already at its ceiling; below it, a check over a budget raises the replayed share instead."""
        if not over:
            self.over = 0
            return False
        if self.replay is not None and self.replay.raise_share():
            self.over = 0
            log.info("forgetting monitor: %s at step %d: replaying a share of %.3f from now on", "; ".join(over),
                     step, self.replay.share)
            return False
        self.over += 1
        if self.over < self.patience:
            return False
        log.warning("forgetting monitor: %s for %d check(s) at step %d%s: saving and stopping", "; ".join(over),
                    self.over, step, "" if self.replay is None else f", replaying at the most ({self.replay.max_share})")
        return True

    def _find_replay(self, args) -> None:
        """The replay mixed into the trainer's training set: this instance's, or, when the trainer rebuilt the
        monitor from a checkpoint (restore_callback_states_from_checkpoint), the one the first instance mixed in."""
        from .replay import ReplayMixture

        dataset = getattr(self._trainer(args), "train_dataset", None)
        if self.replay is None and isinstance(dataset, ReplayMixture):
            self.replay = dataset.owner
        if self.replay is not None and self.replay.mixture is None:
            raise ValueError("ForgettingMonitor: the replay is not mixed into the training set: add the monitor with "
                             ".attach(trainer), which wraps the trainer's training set")

    def _write_row(self, args, state, row, widths, values, audited, scalars) -> None:
        import pyarrow as pa

        from ..io import write_table

        is_probe, is_audit = np.zeros(len(row), dtype=bool), np.zeros(len(row), dtype=bool)
        is_probe[self.map.known] = True
        is_audit[self.map.audit] = True
        columns = {"example_id": pa.array(self.map.example_ids.astype(str)), "source": pa.array(self.map.sources),
                   "probe": pa.array(is_probe), "audit": pa.array(is_audit), "forecast": pa.array(row, pa.float32())}
        if self.map.strata is not None:  # the audit's strata, which the bound weights (predict.audit)
            columns["stratum"] = pa.array(self.map.strata, pa.int8())
        for level, width in widths.items():
            columns[f"halfwidth_{level:g}"] = pa.array(width, pa.float32())
        write_table(pa.table(columns), Path(args.output_dir) / OUTPUT / f"check-{state.global_step:08d}.parquet",
                    {"step": state.global_step, "epoch": state.epoch, "map": self.map.path,
                     "probe_ids": self.map.probe_ids.tolist(), "probe_values": np.round(values, 6).tolist(),
                     "audit_ids": self.map.audit_ids.tolist(), "audit_values": np.round(audited, 6).tolist(),
                     "bound_ends": self.map.bound_ends(self.level) if self.level is not None else None,
                     "method": self.map.method, "levels": sorted(widths), "level": self.level, "budget": self.budget,
                     "scalars": scalars})

    def _check_base(self, baseline: np.ndarray) -> None:
        """The baseline against the map's base NLL at the probes: another model (or another way of scoring)
        shows as a gap far above bf16's rounding."""
        if self.map is None:
            return
        recorded = self.map.base_nll[np.concatenate([self.map.known, self.map.audit])]
        if not np.isfinite(recorded).all():
            log.info("%s records no base NLL at its probes (a matrix imported without the base's log-probs): "
                     "whether the model being trained is the map's base is not checked", self.map.path or "the map")
            return
        gap = float(np.median(np.abs(baseline - recorded)))
        if self.base_tolerance is None:  # asked for on purpose: said, with what it cost where it was measured
            if gap > BASE_TOLERANCE:
                log.warning("forgetting monitor: the model being trained is %.3f nats per token (median) from %s's "
                            "base: the forecast is through another model's map. On the demo that cost (BENCHMARKS.md): "
                            "a sibling trained from other weights ranked its examples with Spearman 0.28 against 0.35 "
                            "through its own map, a descendant 0.28 against 0.39; RMSE 5-12 %% higher", gap,
                            self.map.path or "the map")
            return
        if gap > self.base_tolerance:
            raise DataError(
                f"{self.map.path or 'the forecast map'}: the model being trained scores the map's probes and audit "
                f"examples {gap:.3f} nats per token (median) away from the map's base NLL (tolerance "
                f"{self.base_tolerance}): "
                f"the map is of another model (a sibling trained from other weights, a descendant of the map's "
                f"base), or was scored with another chat template or length ({self.map.scoring}); a change of "
                f"precision or device moves it by far less. Pass base_tolerance=None to forecast through another "
                f"model's map anyway")


def checkpointed(stateful_callbacks: dict | None) -> dict | None:
    """The monitor's state (`state()["attributes"]`) as a checkpoint's `TrainerState.stateful_callbacks` holds it
    (transformers keeps a list where one class has several instances: the first), or None."""
    stored = (stateful_callbacks or {}).get(ForgettingMonitor.__name__)
    if not stored:
        return None
    return (stored[0] if isinstance(stored, list) else stored)["attributes"]


def _probe_rows(probes):
    import pandas as pd

    from .map import UPSTREAM_COLUMNS

    frame = pd.read_parquet(probes) if isinstance(probes, (str, Path)) else pd.DataFrame(probes)
    missing = [c for c in ("example_id", *UPSTREAM_COLUMNS) if c not in frame.columns]
    if missing:
        raise DataError(f"{probes if isinstance(probes, (str, Path)) else 'probes'}: missing upstream column(s) "
                        f"{', '.join(missing)}")
    return frame.reset_index(drop=True)


def _meter(model, tokenizer, rows, scoring: dict | None, token_budget: int, args, optimizer, benchmark=None,
           which=None):
    """A meter in training's precision on the model as the trainer wrapped it: of upstream `rows` (scored as
    `scoring` says), or the options of a benchmark's items at `which` (default all)."""
    import torch

    from ..meter import OptionMeter, ProbeMeter, zero3_retrace

    dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None
    device = next(model.parameters()).device

    def autocast():  # as the trainer trains: accelerate autocasts the model's forward on a CPU too
        if dtype is None:
            from contextlib import nullcontext

            return nullcontext()
        return torch.autocast(device_type=device.type, dtype=dtype)

    settle = zero3_retrace(optimizer) if getattr(args, "deepspeed", None) else None
    if benchmark is None:
        return ProbeMeter.for_rows(model, tokenizer, rows, scoring["chat_template"], scoring["max_length"],
                                   token_budget, autocast, settle)
    return OptionMeter.for_items(model, tokenizer, benchmark, which, token_budget=token_budget, autocast=autocast,
                                 settle=settle)


def _write_trajectory(path: Path, checks: list[dict]) -> None:
    """One line per check so far: a run's forecast trajectory, readable while it runs (rewritten whole, so a
    resume from an earlier checkpoint drops the checks it repeats)."""
    import pandas as pd

    from ..io import atomic_path

    with atomic_path(path) as tmp:
        pd.DataFrame(checks).to_csv(tmp, sep="\t", index=False, float_format="%.6g")
