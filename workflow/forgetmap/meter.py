"""The probes' NLL under the weights being trained: scored on the training device, in training's precision,
in eval mode (dropout off) and put back as it was; under data parallelism each rank scores its share and the
shares are gathered, so every rank holds every probe's value.

Both forgetmap's own online replay and the trainer callback (forgetmap.monitor.callback) measure through it.
"""

from __future__ import annotations

import time
from contextlib import nullcontext

import numpy as np


def _ranks() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class ProbeMeter:
    """`measure()`: the probes' mean NLL per scored token (float64, one per probe, in the given order; NaN
    where a probe has nothing to score: `empty` names those)."""

    def __init__(self, model, tokenizer, rows, chat_template: str, max_length: int, token_budget: int = 4096,
                 autocast=None, shard: bool = True):
        """`shard`: ranks score shares (a model whose forward runs no collective: one process, DDP's module);
        False: every rank scores every probe in step (a sharded model's forward gathers its weights)."""
        from .data.chat import encode_examples
        from .nll import TorchScorer

        encoded = encode_examples(tokenizer, rows, chat_template, max_length)
        self.empty = [str(rows["example_id"].iloc[i]) for i, e in enumerate(encoded) if e.n_scored == 0]
        self.rank, self.world = _ranks() if shard else (0, 1)
        self.share = np.arange(self.rank, len(encoded), self.world)
        self.encoded = [encoded[i] for i in self.share]
        self.count = len(encoded)
        self.tokens = int(sum(e.n_scored for e in encoded))  # over every rank's share
        self.model = model
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.scorer = TorchScorer(model, pad, token_budget)
        self.autocast = autocast or nullcontext
        self.seconds = 0.0  # the last measure's wall time

    def measure(self) -> np.ndarray:
        started = time.perf_counter()
        training = self.model.training
        self.model.eval()
        try:
            with self.autocast():
                mine, _ = self.scorer.score(self.encoded) if self.encoded else (np.zeros(0, np.float32), None)
        finally:
            self.model.train(training)
        values = np.empty(self.count, dtype=np.float64)
        if self.world == 1:
            values[self.share] = mine
        else:
            import torch.distributed as dist

            shares: list = [None] * self.world
            dist.all_gather_object(shares, (self.share.tolist(), np.asarray(mine, np.float64).tolist()))
            for positions, nll in shares:
                values[positions] = nll
        self.seconds = time.perf_counter() - started
        return values
