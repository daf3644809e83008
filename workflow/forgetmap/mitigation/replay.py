"""Replay (paper §6.1): the held-out set no arm replays, which pool examples to replay, the mixture.

- `heldout_examples`: a seeded, sorted draw of upstream example indices kept out of every replay pool
  and used to judge every arm.
- `sampling_weights`: softmax(score / T) over the pool (T = 0.1 in the paper); NaN scores weigh 0.
- `select_replay`: `n` pool examples without replacement, drawn with those weights (`sample`, as the
  paper's runs) or the top `n` (`max`); uniform when there are no scores (`random`). A pool that
  cannot supply `n` distinct examples is an error, never a silent draw with replacement.
- `replay_count`: int(n_task · ratio) + 1 examples, as the reference; `replay_steps`: the step budget
  stretched by (1 + ratio).
- `mixture_batches`: the task's examples and the replayed ones shuffled together, so each step holds
  them in the proportion ratio / (1 + ratio) in expectation (the reference's RandomSampler over the
  mixture).
"""

from __future__ import annotations

import numpy as np

from ..data.batches import task_batches
from ..data.upstream import read_ids, read_rows
from ..errors import DataError

MODES = ("sample", "max")


def heldout_examples(n_examples: int, size: int | float, seed: int) -> np.ndarray:
    """Sorted indices of the held-out examples: `size` of them (an int) or that share (a float < 1)."""
    count = int(round(size * n_examples)) if isinstance(size, float) and size < 1 else int(size)
    if not 0 < count < n_examples:
        raise DataError(f"a held-out set of {count} examples needs 0 < size < {n_examples} (the upstream corpus)")
    return np.sort(np.random.default_rng(seed).choice(n_examples, count, replace=False))


def sampling_weights(scores: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(scores / temperature) in float64; NaN scores get weight 0."""
    logits = np.asarray(scores, dtype=np.float64) / temperature
    finite = np.isfinite(logits)
    if not finite.any():
        raise DataError("no replay candidate has a finite score")
    logits = np.where(finite, logits - logits[finite].max(), -np.inf)
    weights = np.exp(logits)
    return weights / weights.sum()


def select_replay(n: int, pool: np.ndarray, seed: int, scores: np.ndarray | None = None,
                  temperature: float = 0.1, mode: str = "sample") -> np.ndarray:
    """`n` distinct indices of `pool` (upstream indices), in a seeded random order.

    `scores` (one per pool entry) None: uniform. Otherwise `sample` draws with weights
    softmax(scores / temperature) without replacement, `max` takes the `n` highest scores."""
    pool = np.asarray(pool)
    rng = np.random.default_rng(seed)
    if scores is None:
        available = len(pool)
    else:
        scores = np.asarray(scores, dtype=np.float64)
        if scores.shape != pool.shape:
            raise ValueError(f"{len(scores)} scores for a pool of {len(pool)} examples")
        weights = sampling_weights(scores, temperature)
        available = int(np.count_nonzero(weights)) if mode == "sample" else int(np.isfinite(scores).sum())
    if n > available:
        raise DataError(f"the replay pool is exhausted: {n} examples to replay, {available} candidates with a "
                        f"non-zero weight (of {len(pool)}); lower the replay ratio or the held-out set, or raise "
                        f"the temperature")
    if scores is None:
        chosen = rng.choice(len(pool), n, replace=False)
    elif mode == "sample":
        chosen = rng.permutation(rng.choice(len(pool), n, replace=False, p=weights))
    elif mode == "max":
        order = np.argsort(-np.where(np.isfinite(scores), scores, -np.inf), kind="stable")
        chosen = rng.permutation(order[:n])
    else:
        raise ValueError(f"unknown replay mode {mode!r}; allowed: {', '.join(MODES)}")
    return pool[chosen]


def draw_seed(seed: int, task: str, uniform: bool) -> int | list[int]:
    """The seed of a replay draw. A uniform (random replay) draw is seeded by (seed, task): each task gets
    its own random examples, so random replay is an independent baseline for every (task, seed) pair,
    not one draw shared by all. A weighted draw keeps the seed: its weights already differ per task."""
    import zlib

    return [seed, zlib.crc32(task.encode())] if uniform else seed


def replay_count(n_task_examples: int, ratio: float) -> int:
    return int(n_task_examples * ratio) + 1


def replay_steps(steps: int, ratio: float) -> int:
    return int(steps * (1 + ratio))


def mixture_batches(task_examples: list, replay_examples: list, batch_size: int, micro_batches: int, seed: int):
    """The task's and the replayed examples as one shuffled stream (see the module docstring)."""
    return task_batches(list(task_examples) + list(replay_examples), batch_size, micro_batches, seed)


def heldout_command(settings: dict, shards: list[str], out: str) -> dict:
    """`forgetmap heldout-set`: the held-out examples themselves (the upstream contract), so an arm's
    checkpoint is scored on them and nothing else; metadata records their corpus indices."""
    import pyarrow as pa

    from ..io import write_table

    n = len(read_ids(shards))
    size = settings["size"] if settings["size"] < 1 else int(settings["size"])
    index = heldout_examples(n, size, settings["seed"])
    table = pa.Table.from_pandas(read_rows(shards, index), preserve_index=False)
    write_table(table, out, {"indices": index.tolist(), "seed": settings["seed"], "corpus_size": n})
    return {"heldout": len(index), "pool": n - len(index)}


def replay_scores(kind: str, task: str, example_ids, prediction: str | None, matrix: str | None,
                  prediction_seed: int = 0, statistic: str = "loss", risk: float = 0.0, risk_level: float = 0.9,
                  forecast: str | None = None):
    """One score per upstream example (corpus order) for a replay kind; None for `random`.

    `statistic` loss: Z or its prediction, every example scored. forgotten_1to0: Y (1 for 1->0) or its
    predicted P(Y = 1), which exist only for the items the base model answered right: every other
    example scores NaN and is never drawn. `risk` β: predicted scores become μ + β h, h the conformal
    half-width at `risk_level` written beside the prediction (forgetmap.predict.conformal). A task that
    is forecast rather than predicted in a split reads its `forecast` row (and half-widths) instead."""
    import pandas as pd

    if kind == "random":
        return None
    if kind == "predicted":
        from ..predict.protocol import intervals_file, seed_file

        predicted = pd.read_parquet(forecast or seed_file(prediction, prediction_seed), columns=["example_id", task])
        row = predicted.set_index("example_id")[task]
        if risk:
            from ..predict.protocol import interval_column_of

            path = forecast or intervals_file(prediction, prediction_seed)
            column = interval_column_of(path, risk_level, task)
            if column is None:
                raise DataError(f"{forecast or prediction}: no conformal intervals beside the prediction at level "
                                f"{risk_level:g} (they need a regression method, at least 3 train tasks and the level "
                                f"in prediction.intervals): risk-aware replay cannot read {path}")
            widths = pd.read_parquet(path, columns=["example_id", column])
            row = row + risk * widths.set_index("example_id")[column].reindex(row.index)
    else:
        from ..matrix import ForgettingMatrix

        forgetting = ForgettingMatrix.read(matrix)
        values = forgetting.row(task) if kind == "ground_truth" else forgetting.base_nll
        row = pd.Series(values, index=forgetting.example_ids)
    source = forecast or prediction or matrix
    if statistic == "loss":
        missing = pd.Index(example_ids).difference(row.index)
        if len(missing):
            raise DataError(f"{source}: no score for upstream example {missing[0]!r}: rebuild it")
    elif not pd.Index(example_ids).isin(row.index).any():
        raise DataError(f"{source}: none of its items is an upstream example of this corpus: rebuild it")
    return row.reindex(example_ids).to_numpy(dtype=np.float64)


def replay_command(settings: dict, heldout: str, shards: list[str], task: str, out: str,
                   prediction: str | None = None, matrix: str | None = None, forecast: str | None = None) -> dict:
    """`forgetmap replay-selection`: the replayed upstream examples (upstream contract, in draw order)."""
    import pandas as pd
    import pyarrow as pa

    from ..io import read_metadata, write_table

    ids = read_ids(shards)
    held = np.asarray(read_metadata(heldout)["indices"])
    pool = np.setdiff1d(np.arange(len(ids)), held)
    n_task = int((pd.read_parquet(task, columns=["split"])["split"] == "train").sum())
    n = replay_count(n_task, settings["ratio"])
    scores = replay_scores(settings["replay"], settings["task"], ids, prediction, matrix,
                           settings["prediction_seed"], settings["statistic"], settings["risk"], settings["risk_level"],
                           forecast)
    chosen = select_replay(n, pool, draw_seed(settings["seed"], settings["task"], scores is None),
                           None if scores is None else scores[pool], settings["temperature"], settings["selection"])
    assert not np.isin(chosen, held).any()  # the pool excludes the held-out set by construction
    table = pa.Table.from_pandas(read_rows(shards, chosen), preserve_index=False)
    write_table(table, out, {**settings, "indices": chosen.tolist()})
    return {"replayed": n, "pool": len(pool), "task_examples": n_task}
