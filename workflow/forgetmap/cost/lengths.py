"""The lengths of a model's examples, tokenized as its jobs tokenize them, for counting a job's work before it runs.

Where a data file exists, a sample of its rows; before it does, its rows as its job will write them where that is
cheap to know (forgetmap.plan's `planned_data`: the demo's generators, a local file's rows); each tokenized by the
base's tokenizer where its files exist (a pretrained base's own files, found at planning). Only where neither is
possible is an example taken at its `max_length` (an upper bound, said in the time table per row).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SAMPLE = 256  # examples tokenized to measure a file's mean length


class Lengths:
    """Mean tokens of a model's examples, tokenized as its jobs tokenize them, read once per file."""

    def __init__(self, plan, model: str):
        self.plan, self.model = plan, model
        self._tokenizer = False  # not yet looked for
        self._samples: dict = {}
        self._frames: dict = {}  # data files not written yet, as their jobs will write them
        self.bounded = False  # some length was taken at its max_length

    def tokenizer(self):
        if self._tokenizer is False:
            self._tokenizer = None
            base = Path(self.plan.checkpoint(self.model, "base"))
            local = self.plan.base_files.get(self.model, {}).get("local")
            if not base.exists() and local:  # a pretrained base's own files, found at planning
                base = Path(local)
            if base.is_dir() and any(base.glob("tokenizer*")) or (base / "base.json").exists():
                try:
                    from ..models import load_tokenizer

                    self._tokenizer = load_tokenizer(base)
                except Exception:  # a pointer to weights not yet downloaded: the lengths are bounded instead
                    self._tokenizer = None
        return self._tokenizer

    def mean(self, path: str, max_length: int, template: str, split: str | None = None) -> float:
        """Mean tokens of the examples in `path` (a shard or a task file), at most `max_length`."""
        sample = self.sample(path, max_length, template, split)
        if sample is None:
            self.bounded = True
            return float(max_length)
        return float(sample.mean())

    def batches(self, path: str, max_length: int, template: str, count: int, budget: int, max_padding: float,
                packing: bool) -> int | None:
        """The batches the scorer makes of `count` examples like the sample of `path` (forgetmap.nll's plan: on
        a CPU batches of equal lengths, so one per length and budget), or None where the lengths are not known."""
        sample = self.sample(path, max_length, template)
        if sample is None or not count:
            return None
        from ..data.batches import length_batches
        from ..data.packing import packed_batches

        lengths = np.resize(sample, int(count))  # the sample's lengths repeated to the file's count
        return len(packed_batches(lengths, budget) if packing else length_batches(lengths, budget, max_padding))

    def step_tokens(self, path: str, max_length: int, template: str, split: str | None, batch: int,
                    micro: int) -> float | None:
        """The tokens one optimizer step computes, padding included: `micro` micro-batches of `batch` examples
        drawn at random, each padded to its longest (the step's examples sorted by length first where there are
        several micro-batches, as forgetmap.data.batches draws them); None where the lengths are not known."""
        sample = self.sample(path, max_length, template, split)
        if sample is None:
            return None
        rng = np.random.default_rng(0)
        drawn = np.sort(rng.choice(sample, size=(64, micro, batch)).reshape(64, -1), axis=1) if micro > 1 \
            else rng.choice(sample, size=(64, batch))
        return float(drawn.reshape(64, micro, batch).max(axis=2).sum(axis=1).mean() * batch)

    def sample(self, path: str, max_length: int, template: str, split: str | None = None):
        """The tokens of up to SAMPLE examples of `path` (an array), or None where they cannot be measured yet."""
        key = (path, max_length, split)
        if key not in self._samples:
            self._samples[key] = self._measure(path, max_length, template, split)
        return self._samples[key]

    def _measure(self, path: str, max_length: int, template: str, split: str | None):
        tokenizer = self.tokenizer()
        frame = self.frame(path) if tokenizer is not None else None
        if frame is None:
            return None
        from ..data.chat import encode_examples

        if split is not None and "split" in frame:
            frame = frame[frame["split"] == split]
        if "kind" not in frame:  # a task: prompt and response, as a fine-tune renders them
            frame = frame.assign(kind="chat", text="")
        frame = frame.iloc[:SAMPLE] if len(frame) <= SAMPLE else frame.sample(SAMPLE, random_state=0)
        if frame.empty:
            return None
        try:
            encoded = encode_examples(tokenizer, frame, template, max_length)
        except Exception:  # a template the tokenizer lacks is the preflight's to name; here the length is bounded
            return None
        return np.array([len(e.ids) for e in encoded], dtype=np.int64)

    def frame(self, path: str):
        """A data file's rows: read where it exists, else as its job will write them where that is cheap to know
        (forgetmap.plan's `planned_data`: the demo's generators, a local file's rows), else None."""
        if Path(path).exists():
            import pandas as pd

            return pd.read_parquet(path)
        if path not in self._frames:
            self._frames[path] = self.plan.planned_data(path)
        return self._frames[path]

    def items(self, path: str) -> tuple[int, int, float]:
        """A shard's items: (multiple-choice, free-form, mean options of the multiple-choice ones); what is not
        known yet, none."""
        if Path(path).exists():
            import pyarrow.parquet as pq

            names = pq.ParquetFile(path).schema_arrow.names
            if "answer" not in names:
                return 0, 0, 0.0
            table = pq.read_table(path, columns=[c for c in ("answer", "choices") if c in names]).to_pandas()
        else:
            table = self.frame(path)
            if table is None or "answer" not in table:
                return 0, 0, 0.0
        answered = table["answer"].notna()
        if "choices" not in table:
            return 0, int(answered.sum()), 0.0
        options = table["choices"].map(lambda c: len(c) if c is not None and not isinstance(c, float) else 0)
        mc = answered & (options > 0)
        return int(mc.sum()), int((answered & ~mc).sum()), float(options[mc].mean()) if mc.any() else 0.0
