"""`ForecastReplay`: the replay the forgetting monitor steers, as a data-side object.

A callback cannot change a trainer's loop: it sees the weights and the step, not the batches. So the replay
lives with the data. `ForgettingMonitor(map, budget=..., replay=ForecastReplay(upstream))` and `.attach(trainer)`
wrap the trainer's training set, after the trainer prepared it (TRL tokenizes, and with `packing=True` packs,
in its constructor), in a stream that mixes in upstream examples:

- which ones: the paper's targeted draw (§6.1), softmax(forecast / T) over the map's examples at the latest
  check (T = 0.1, as the paper's runs); before the first check, uniform (random replay). The probes are never
  replayed: training on them would lower what the monitor measures, and the forecast with it; nor are the
  examples given as `exclude` (a held-out set the run is judged on, as the paper keeps one);
- how many: a share of the stream's examples. It starts at `share`; at each check whose forecast upper bound
  is over the budget the monitor raises it by `step`, up to `max_share`. It never lowers it. Only once the
  share is at `max_share` and the bound stays over the budget for `patience` checks does training stop;
- at what cost: none in steps. The trainer planned its steps and its learning-rate schedule from the
  training set's length, so a replayed example takes the place of a task example at its position in the
  epoch's seeded order (the epoch trains on `1 - share` of the task's examples, each epoch a new draw of
  which). A training set without a length is a stream: replayed examples go between its examples.

What packing means here: TRL packs the training set once, before training, into rows of `max_length` tokens.
A mixture that changes while training runs cannot be inside those rows. So, when the training set's rows
carry `seq_lengths` (packed), a replayed row is packed too: drawn examples, whole, until the next would not
fit in `max_length` tokens. Task and replay examples never share a row, and the share counts rows, which is
close to a share of tokens. Unpacked, a replayed row is one example.

A replayed row carries the keys the training set's rows carry that a collator reads (`input_ids`, `labels`,
`attention_mask`, `completion_mask`, `assistant_masks`, `seq_lengths`, `position_ids`, `token_type_ids`),
encoded as forgetmap scores the example (the map's chat template and length; a chat example's loss on its
response only, where the rows carry `labels` or a mask). Any other key (a raw `text` column) is left out,
which the trainer's `remove_unused_columns` (its default) drops from the task's rows as well.

The share, the draw's weights and the epoch live in shared memory, so DataLoader workers, forked or spawned,
read what the monitor last set. A worker reads them when it makes a row, and the loader holds
`num_workers x prefetch_factor` batches ahead, so a change reaches training that many batches later.
"""

from __future__ import annotations

import numpy as np
from torch.utils.data import IterableDataset

from ..errors import DataError
from .map import UPSTREAM_COLUMNS, upstream_files

KEYS = ("input_ids", "labels", "attention_mask", "completion_mask", "assistant_masks", "seq_lengths", "position_ids",
        "token_type_ids")
IGNORE = -100


class ForecastReplay:
    """`upstream`: the upstream examples the map was made from (a directory of shard-*.parquet, the files, or a
    frame with `example_id` and the upstream columns); every example of the map must be among them.
    `share`, `step`, `max_share`: the replayed share of the stream's rows at the start, its rise at each check
    over the budget, and its ceiling (< 1). `temperature`: of the targeted draw. `seed`: of the epochs' order
    and the draws (None: the trainer's `args.seed`). `shuffle`: a sized training set's order, reshuffled each
    epoch (the trainer does not shuffle a stream). `exclude`: example ids never replayed."""

    def __init__(self, upstream, *, share: float = 0.0, step: float = 0.1, max_share: float = 0.5,
                 temperature: float = 0.1, seed: int | None = None, shuffle: bool = True, exclude=()):
        for name, value in (("share", share), ("max_share", max_share)):
            if not 0 <= value < 1:
                raise ValueError(f"ForecastReplay: {name} must be in [0, 1), not {value}")
        if share > max_share:
            raise ValueError(f"ForecastReplay: share {share} is above max_share {max_share}")
        if not 0 < step <= 1:
            raise ValueError(f"ForecastReplay: step must be in (0, 1], not {step}")
        if temperature <= 0:
            raise ValueError(f"ForecastReplay: temperature must be positive, not {temperature}")
        self.upstream = upstream
        self.start_share, self.step, self.max_share = float(share), float(step), float(max_share)
        self.temperature, self.seed, self.shuffle = float(temperature), seed, shuffle
        self.exclude = {str(e) for e in exclude}
        self.mixture: ReplayMixture | None = None

    # --- set up by the monitor ------------------------------------------------------------------------

    def wrap(self, trainer, forecast_map) -> None:
        """Put the mixture in place of `trainer.train_dataset` (a map's examples, the trainer's tokenizer)."""
        import torch

        dataset = trainer.train_dataset
        if dataset is None:
            raise ValueError("ForecastReplay: the trainer has no training set to mix the replay into")
        if isinstance(dataset, ReplayMixture):
            raise ValueError("ForecastReplay: the trainer's training set is already a replay mixture")
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        if tokenizer is None:
            raise ValueError("ForecastReplay: the trainer has no tokenizer (processing_class) to encode the replay")
        first = next(iter(dataset))
        keys = [k for k in first if k in KEYS]
        if "input_ids" not in keys:
            raise ValueError(f"ForecastReplay: the training set's rows have no input_ids (keys {sorted(first)}): "
                             f"the replay mixes into a tokenized training set (a trainer that tokenizes in its "
                             f"collator cannot take it)")
        other = sorted(set(first) - set(keys))
        if other and not getattr(trainer.args, "remove_unused_columns", True):
            raise ValueError(f"ForecastReplay: the training set's rows carry {other}, which a replayed row cannot, "
                             f"and remove_unused_columns=False keeps them for the collator: remove them from the "
                             f"training set, or let the trainer remove unused columns")
        packed = "seq_lengths" in keys
        trained = getattr(trainer.args, "max_length", None)  # TRL's; transformers' Trainer has none
        length = min(forecast_map.scoring["max_length"], trained or forecast_map.scoring["max_length"])
        limit = (trained or len(first["input_ids"])) if packed else length  # a packed row's tokens
        rows = _upstream_rows(self.upstream, forecast_map)
        candidates = np.ones(len(forecast_map.example_ids), dtype=bool)
        candidates[forecast_map.known] = False  # never the probes
        candidates[forecast_map.audit] = False  # nor the audit examples: replaying them would bias the bound
        candidates[np.isin(forecast_map.example_ids, list(self.exclude))] = False
        if not candidates.any():
            raise ValueError("ForecastReplay: every example of the map is a probe or excluded: nothing to replay")
        seed = trainer.args.seed if self.seed is None else self.seed
        state = torch.tensor([self.start_share, 0.0], dtype=torch.float64).share_memory_()
        cdf = torch.from_numpy(np.cumsum(candidates / candidates.sum())).share_memory_()
        drawn = torch.zeros(len(candidates), dtype=torch.int64).share_memory_()
        self.mixture = ReplayMixture(dataset, rows, candidates, tokenizer, forecast_map.scoring["chat_template"],
                                     length, limit, keys, packed, seed, self.shuffle, state, cdf, drawn)
        self.mixture.owner = self
        trainer.train_dataset = self.mixture

    # --- steered by the monitor -----------------------------------------------------------------------

    @property
    def share(self) -> float:
        return float(self._bound().state[0]) if self.mixture is not None else self.start_share

    @share.setter
    def share(self, value: float) -> None:
        self._bound().state[0] = float(value)

    def raise_share(self) -> bool:
        """One step up, to `max_share` at most; False when the share was already there."""
        if self.share >= self.max_share:
            return False
        self.share = min(self.max_share, self.share + self.step)
        return True

    def follow(self, row: np.ndarray) -> None:
        """Draw from now on with softmax(row / T) over the map's examples, the probes and any NaN left out."""
        from ..mitigation.replay import sampling_weights

        mixture = self._bound()
        scores = np.where(mixture.candidates, np.asarray(row, dtype=np.float64), np.nan)
        weights = sampling_weights(scores, self.temperature)
        cdf = np.cumsum(weights)
        mixture.cdf.copy_(__import__("torch").from_numpy(cdf / cdf[-1]))

    def drawn(self) -> dict[str, int]:
        """How many times each example was replayed so far (those replayed at least once), as made by the
        loader: rows a loader made ahead and training never reached count too."""
        mixture = self._bound()
        counts = mixture.drawn.numpy()
        return {str(mixture.ids[i]): int(counts[i]) for i in np.flatnonzero(counts)}

    def _bound(self) -> "ReplayMixture":
        if self.mixture is None:
            raise ValueError("ForecastReplay: not mixed into a trainer yet (ForgettingMonitor(..., replay=...)"
                             ".attach(trainer) does it)")
        return self.mixture


def _upstream_rows(upstream, forecast_map):
    """The map's examples' upstream rows, in the map's order (from shards or a frame)."""
    import pandas as pd

    if isinstance(upstream, pd.DataFrame):
        frame, where = upstream, "the upstream frame"
    else:
        files = upstream_files(upstream)
        frame, where = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True), files[0]
    missing = [c for c in ("example_id", *UPSTREAM_COLUMNS) if c not in frame.columns]
    if missing:
        raise DataError(f"{where}: missing upstream column(s) {', '.join(missing)}")
    frame = frame.assign(example_id=frame["example_id"].astype(str)).drop_duplicates("example_id").set_index(
        "example_id")
    absent = pd.Index(forecast_map.example_ids).difference(frame.index)
    if len(absent):
        raise DataError(f"{where}: {len(absent)} of the map's {len(forecast_map.example_ids)} examples are not among "
                        f"these upstream examples (first: {absent[0]!r}): give the upstream the map was made from")
    return frame.loc[forecast_map.example_ids, list(UPSTREAM_COLUMNS)].reset_index()


class ReplayMixture(IterableDataset):
    """The training stream with replayed rows in it (see the module docstring)."""

    def __init__(self, dataset, rows, candidates, tokenizer, template, max_length, row_length, keys, packed, seed,
                 shuffle, state, cdf, drawn):
        self.dataset, self.rows, self.candidates, self.tokenizer = dataset, rows, candidates, tokenizer
        self.template, self.max_length, self.row_length = template, max_length, row_length
        self.keys, self.packed = keys, packed
        self.seed, self.shuffle = seed, shuffle
        self.state, self.cdf, self.drawn = state, cdf, drawn  # shared memory: [share, epoch], the draw, counts
        self.ids = rows["example_id"].to_numpy()
        self._encoded: dict[int, object] = {}  # per process: the examples it has encoded

    def __len__(self):
        return len(self.dataset)  # TypeError for a stream, as has_length expects

    def set_epoch(self, epoch: int) -> None:
        self.state[1] = float(epoch)

    def __iter__(self):
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        epoch = int(self.state[1])
        try:
            n = len(self.dataset)
        except TypeError:
            n = None
        if n is None:  # a stream (it shards itself among workers, as a datasets IterableDataset does)
            rng = np.random.default_rng([self.seed, epoch, worker])
            position = 0
            for example in self.dataset:
                while rng.random() < float(self.state[0]):
                    yield self._replayed(epoch, worker, position)
                    position += 1
                yield example
                position += 1
            return
        order = np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle else np.arange(n)
        coins = np.random.default_rng([self.seed, epoch, 1]).random(n)
        for i in range(worker, n, workers):
            yield self._replayed(epoch, 0, i) if coins[i] < float(self.state[0]) else self.dataset[int(order[i])]

    def _replayed(self, epoch: int, worker: int, position: int) -> dict:
        """A replayed row: one drawn example, or (packed) drawn examples until the next would not fit."""
        rng = np.random.default_rng([self.seed, epoch, worker, position, 2])
        pieces, used = [], 0
        while True:
            index = min(int(np.searchsorted(self.cdf.numpy(), rng.random(), side="right")), len(self.ids) - 1)
            example = self._example(index)
            if pieces and used + len(example.ids) > self.row_length:
                return _row(pieces, self.keys)
            self.drawn[index] += 1
            pieces.append(example)
            used += len(example.ids)
            if not self.packed:
                return _row(pieces, self.keys)

    def _example(self, index: int):
        if index not in self._encoded:
            from ..data.chat import encode_examples

            self._encoded[index] = encode_examples(self.tokenizer, self.rows.iloc[[index]], self.template,
                                                   self.max_length)[0]
        return self._encoded[index]


def _row(pieces, keys) -> dict:
    """One training row of encoded examples (several when packed), with the training set's keys."""
    ids = np.concatenate([e.ids for e in pieces])
    targets = np.zeros(len(ids), dtype=np.int64)
    at = 0
    for e in pieces:
        targets[at + e.target_positions()] = 1
        at += len(e.ids)
    values = {"input_ids": ids, "labels": np.where(targets == 1, ids, IGNORE), "attention_mask": np.ones_like(ids),
              "completion_mask": targets, "assistant_masks": targets, "seq_lengths": [len(e.ids) for e in pieces],
              "position_ids": np.concatenate([np.arange(len(e.ids)) for e in pieces]),
              "token_type_ids": np.zeros_like(ids)}
    return {key: values[key] if key == "seq_lengths" else values[key].tolist() for key in keys}
