"""Fine-tuning tasks: the demo generator or a user file, validated, in the task contract.

The task contract is `prompt`, `response`, `split` (train / validation). A user file may name its
columns differently (`columns: {prompt: inputs, response: targets}` for FLAN), carry its own split
column, come with a separate validation file, or be split deterministically (a seeded permutation,
as the paper splits Dolly 80/20).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import DataError
from ..io import write_table
from . import demo
from .tables import read_table, require_columns, require_text

SPLITS = ("train", "validation")


def read_task(name: str, spec: dict, seed: int, demo_seed: int) -> pd.DataFrame:
    """The task in the task contract; `seed` splits user files, `demo_seed` is the demo world."""
    if spec.get("format") == "hf":
        frame = _read_dataset(spec)
        validation = _read_dataset(spec, spec["validation_split"]) if spec.get("validation_split") else None
    elif spec.get("path") is None:
        return demo.task_examples(name, spec["n_examples"], demo_seed, spec["validation_fraction"])
    else:
        frame = _read_user_file(spec["path"], spec)
        validation = _read_user_file(spec["validation_path"], spec) if spec.get("validation_path") else None
    if validation is not None:
        frame = pd.concat([frame.assign(split="train"), validation.assign(split="validation")],
                          ignore_index=True)
    elif "split" not in frame:
        order = np.random.default_rng(seed).permutation(len(frame))
        n_validation = int(round(len(frame) * spec["validation_fraction"]))
        split = np.full(len(frame), "train", dtype=object)
        split[order[len(frame) - n_validation:]] = "validation"
        frame["split"] = split
    return frame[["prompt", "response", "split"]]


def check_dataset(spec: dict) -> None:
    """A `format: hf` task's shape, at planning (forgetmap.data.hf.check): its columns and filter, for
    its split and its validation split."""
    from . import hf

    for split in (None, spec.get("validation_split")) if spec.get("validation_split") else (None,):
        hf.check(spec, ["prompt", "response", "context"], ["prompt", "response"], split)


def _read_dataset(spec: dict, split: str | None = None) -> pd.DataFrame:
    """A task from a Hugging Face dataset (forgetmap.data.hf), checked as a file would be."""
    from . import hf

    frame, _ = hf.frame(spec, ["prompt", "response", "context"], split)
    where = hf.describe({**spec, "split": split or spec["split"]})
    require_columns(frame, ["prompt", "response"], where)
    require_text(frame, "prompt", where)
    require_text(frame, "response", where)
    return frame


def _read_user_file(path: str, spec: dict) -> pd.DataFrame:
    frame = read_table(path)
    mapping = spec.get("columns") or {}
    require_columns(frame, [mapping.get("prompt", "prompt"), mapping.get("response", "response")], path)
    frame = frame.rename(columns={mapping.get(k, k): k for k in ("prompt", "response")})
    if frame.empty:
        raise DataError(f"{path}: no rows")
    require_text(frame, "prompt", path)
    require_text(frame, "response", path)
    if "split" in frame:
        bad = ~frame["split"].isin(SPLITS)
        if bad.any():
            row = int(bad[bad].index[0])
            raise DataError(f"{path}: row {row}, column 'split': {frame['split'][row]!r} is not one "
                            f"of {', '.join(SPLITS)}")
    return frame


def training_frame(task: str) -> pd.DataFrame:
    """A task file's training split (prompt, response, ...)."""
    frame = pd.read_parquet(task)
    return frame[frame["split"] == "train"]


def training_examples(tokenizer, task: str, chat_template: str, max_length: int, frame: pd.DataFrame | None = None):
    """A task file's training split (or `frame`, its rewritten responses) encoded as fine-tuning encodes it
    (what every fine-tune trains on, and what token masks and example weights are computed over)."""
    from .chat import encode_chat

    frame = training_frame(task) if frame is None else frame
    return encode_chat(tokenizer, frame["prompt"].tolist(), frame["response"].tolist(), chat_template, max_length)


def task_command(settings: dict, out: str) -> dict:
    """`forgetmap prepare-task` (settings: name, spec, seed, demo_seed)."""
    return write_task(settings["name"], settings["spec"], settings["seed"], settings["demo_seed"], out)


def write_task(name: str, spec: dict, seed: int, demo_seed: int, out: str) -> dict:
    frame = read_task(name, spec, seed, demo_seed)
    n_train = int((frame["split"] == "train").sum())
    if n_train == 0:
        raise DataError(f"task {name!r} ({spec.get('path') or spec.get('dataset') or 'demo'}): no training examples")
    provenance = {"task": name, "category": spec["category"]}
    if spec.get("format") == "hf":  # what was read: a changed dataset under the same revision shows here
        from . import hf

        provenance.update(dataset=spec["dataset"], revision=spec.get("revision"), fingerprint=hf.fingerprint(spec))
    write_table(pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False), out, provenance)
    return {"train": n_train, "validation": len(frame) - n_train}
