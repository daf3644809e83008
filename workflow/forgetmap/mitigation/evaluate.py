"""An arm's run judged: every fine-tune of its job and every interpolation of it toward the base, on the
held-out upstream examples (forgetting) and on the task's validation split (learning).

The held-out examples are scored exactly as the forgetting matrix scores upstream shards (same backend,
spans and settings), so ΔNLL against the matrix's base NLL is the forgetting the run caused. The learning
side is the mean NLL of the task's validation responses, measured with the base model beside the
fine-tune so that the cheap signals (forgetmap.mitigation.signals: KL from the base on the task's data,
‖θ − θ_base‖, the validation loss drop) come from the same pass.

A job's fine-tunes are one per value of its swept knob (forgetmap.mitigation.knobs); each is judged at
α = 1 (itself) and at every α of `mitigation.interpolation` (forgetmap.mitigation.interpolation: θ_α
written to a temporary checkpoint, scored and deleted). The scores file holds every variant's held-out
scores (the scores contract plus `knob`, `value`, `alpha`); the JSON summary lists the variants with
their learning and signals, and each fine-tune's training costs.

`evaluate_command` judges the matrix's own plain fine-tune (a job of its own); `judge` serves it and an
arm's run (forgetmap.arm).
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import DataError

TRAINING = ("steps", "tokens", "seconds", "examples", "replayed", "replayed_tokens", "masked_share", "online",
            "forward_tokens", "backward_tokens", "generated_tokens", "peak_memory_mb", "trained_parameters",
            "kl_base_training", "l2_sp_distance", "ema_base_weight", "parameters",
            "generation_seconds", "sdft_kept")


def read_variants(path: str, items: bool) -> list[tuple[tuple, pd.DataFrame]]:
    """A run's held-out scores split by variant ((value, alpha), file order); `items`: with correctness."""
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    if items and "correct" not in names:
        raise DataError(f"{path}: no column 'correct': the arm was scored before correctness was; rescore it")
    columns = ["example_id", "nll", *(["correct", "margin", "k"] if items else []),
               *[c for c in ("value", "alpha") if c in names]]
    table = pd.read_parquet(path, columns=columns)
    if "alpha" not in table:
        return [((np.nan, 1.0), table)]
    key = table["value"].fillna(-np.inf).astype(str) + "|" + table["alpha"].astype(str)
    return [((part["value"].iloc[0], float(part["alpha"].iloc[0])), part.reset_index(drop=True))
            for _, part in table.groupby(key, sort=False)]


def read_primary(path: str) -> pd.DataFrame:
    """The held-out scores (example_id, nll) of a run's first fine-tune as trained (α = 1): the first
    variant at α = 1 in the file's order, which `judge` writes fine-tune by fine-tune."""
    return next(part for (_, alpha), part in read_variants(path, False) if alpha == 1.0)[["example_id", "nll"]]


class Learning:
    """The base model and the task's validation examples, loaded once, measuring checkpoint after checkpoint
    what each learned and its cheap signals."""

    def __init__(self, base: str, task: str, settings: dict):
        import torch

        from ..data.chat import encode_chat
        from ..models import load_model, load_tokenizer, pick_device

        self.device = pick_device(settings["device"])
        self.dtype = torch.float32 if self.device.type == "cpu" else torch.bfloat16
        self.tokenizer = load_tokenizer(base)
        frame = pd.read_parquet(task)
        frame = frame[frame["split"] == "validation"]
        self.validation = encode_chat(self.tokenizer, frame["prompt"].tolist(), frame["response"].tolist(),
                                      settings["chat_template"], settings["max_length"]) if len(frame) else []
        self.base = load_model(base, self.device, self.dtype)
        self.base_nll = self._signals(self.base)["validation_nll"]

    def _signals(self, model) -> dict:
        from .signals import task_signals

        return task_signals(model, self.base, self.validation, self.tokenizer.pad_token_id)

    def __call__(self, model_dir: str | Path) -> dict:
        """One checkpoint's validation NLL, its signals and how far it moved from the base."""
        from ..models import load_model, release_memory
        from .signals import weight_distance

        model = load_model(model_dir, self.device, self.dtype)
        signals = self._signals(model)
        learning = {**signals, "weight_distance": weight_distance(model, self.base),
                    "loss_drop": self.base_nll - signals["validation_nll"]}
        del model
        release_memory()
        return learning


@contextmanager
def checkpoint(base: str, tune: dict, alpha: float, work: Path):
    """The checkpoint of a fine-tune at `alpha`: itself at 1, else θ_α written into `work` and deleted after."""
    if alpha == 1.0:
        yield Path(tune["dir"])
        return
    from .interpolation import interpolate

    model_dir = interpolate(base, tune["dir"], alpha, work / f"alpha-{alpha:g}")
    try:
        yield model_dir
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


def judge(fine_tunes: list[dict], base: str, heldout: str, task: str, settings: dict, alphas: list[float],
          threads: int, out: str, summary: str) -> dict:
    """Every fine-tune ({knob, value, dir}) at α = 1 and at every α of `alphas`: the variants' held-out
    scores into `out`, their learning, signals and the fine-tunes' training facts into `summary`.

    Two passes, so that the device never holds the two kinds of work at once: first torch measures every
    variant's learning beside the base model, then the base is let go and every variant's held-out examples
    are scored (on the vllm backend by one engine, reloaded per variant, which claims its memory share of
    the whole GPU). An interpolation is written once per pass: disk holds one at a time."""
    from ..engine import VllmEngines
    from ..io import atomic_path, write_table
    from ..models import release_memory, set_threads
    from ..score import score_shard

    import pyarrow as pa

    set_threads(threads)
    plan = [(tune, alpha) for tune in fine_tunes for alpha in sorted({*alphas, 1.0}, reverse=True)]
    trainings = []
    for tune in fine_tunes:
        training = json.loads((Path(tune["dir"]) / "train_summary.json").read_text())
        trainings.append({"knob": tune["knob"], "value": tune["value"], **{k: training.get(k) for k in TRAINING}})
    work = Path(tempfile.mkdtemp(prefix=".variants.", dir=Path(out).parent))
    engines = VllmEngines()  # the vllm backend: one engine for every variant, weights reloaded
    tables, variants = [], []
    try:
        learned = Learning(base, task, settings)
        base_nll = learned.base_nll
        learning = []
        for tune, alpha in plan:
            with checkpoint(base, tune, alpha, work) as model_dir:
                learning.append(learned(model_dir))
        del learned
        release_memory()
        for (tune, alpha), facts in zip(plan, learning):
            with checkpoint(base, tune, alpha, work) as model_dir:
                scores = work / "scores.parquet"
                scored = score_shard(str(model_dir), heldout, settings, threads, str(scores), engines)
            frame = pd.read_parquet(scores)
            frame["knob"] = tune["knob"] or ""
            frame["value"] = np.float64(tune["value"])
            frame["alpha"] = np.float64(alpha)
            tables.append(frame)
            variants.append({"knob": tune["knob"], "value": tune["value"], "alpha": alpha,
                             "heldout": scored["examples"], **facts})
    finally:
        engines.close()
        shutil.rmtree(work, ignore_errors=True)
    write_table(pa.Table.from_pandas(pd.concat(tables, ignore_index=True), preserve_index=False), out,
                {"base": str(base), "backend": settings["backend"]})
    first = variants[0]  # the first fine-tune as trained: the run's headline figures
    result = {"validation_nll": first["validation_nll"], "base_validation_nll": base_nll,
              "heldout": first["heldout"], **{k: v for k, v in trainings[0].items() if k not in ("knob", "value")},
              "variants": variants, "fine_tunes": trainings}
    with atomic_path(summary) as tmp:
        tmp.write_text(json.dumps(result, indent=1))
    return {k: v for k, v in result.items() if k not in ("variants", "fine_tunes")} | {"variants": len(variants)}


def evaluate_command(model_dir: str, base: str, heldout: str, task: str, settings: dict, alphas: list[float],
                     threads: int, out: str, summary: str) -> dict:
    """`forgetmap evaluate-arm`: a checkpoint (the matrix's plain fine-tune) judged, with its interpolations."""
    return judge([{"knob": None, "value": math.nan, "dir": model_dir}], base, heldout, task, settings, alphas,
                 threads, out, summary)
