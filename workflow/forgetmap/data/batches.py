"""Encoded examples into tensors, and the batch sources training draws from.

`pad` is the one padding helper (scoring and training); `collate` adds the labels a training batch
needs, applying each example's loss mask and weight. A *batch source* is an iterator that yields, for
every optimizer step, that step's micro-batches (lists of encoded examples); the training loop never
knows where they come from, so a new data mixture is a new source, not a branch in the loop.
`task_batches` is the plain source: a task's examples in a seeded order, epoch after epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from .chat import Encoded

if TYPE_CHECKING:  # the batch sources serve jobs that never load a model (replay selection): torch when padding
    import torch

IGNORE = -100  # the label of a position that carries no loss


def pad(examples: list[Encoded], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded token ids and the attention mask (1 on real tokens)."""
    import torch

    width = max(len(e.ids) for e in examples)
    ids = np.full((len(examples), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(examples), width), dtype=np.int64)
    for row, e in enumerate(examples):
        ids[row, :len(e.ids)] = e.ids
        mask[row, :len(e.ids)] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def collate(examples: list[Encoded], pad_id: int, packed: bool = False,
            flat: bool = False) -> dict[str, torch.Tensor | int | None]:
    """`pad` plus labels: each example's target tokens its mask keeps, IGNORE elsewhere; and
    `weights`, each label's example weight (None when every weight is 1: the plain mean). `packed`: the
    examples in rows without padding between them (forgetmap.data.packing), `position_ids` in place of the
    attention mask (`flat`: in one row, as flash-attention takes them); an example's first token is never a label,
    so no loss crosses from one to the next.
    `tokens`: the real tokens, padding not counted."""
    import torch

    if packed:
        from .packing import Layout

        layout = Layout(examples, pad_id, flat=flat)
        ids, mask, positions = layout.ids, None, layout.position_ids
        rows, columns = layout.row, layout.offset
    else:
        ids, mask = pad(examples, pad_id)
        positions, rows, columns = None, np.arange(len(examples)), np.zeros(len(examples), dtype=np.int64)
    labels = np.full(ids.shape, IGNORE, dtype=np.int64)
    weights = np.zeros(ids.shape, dtype=np.float32)
    for e, row, column in zip(examples, rows, columns):
        kept = e.target_positions()
        kept = kept[kept > 0]  # position 0 predicts nothing (a packed row's would be predicted from the example before)
        labels[row, kept + column] = e.ids[kept]
        weights[row, kept + column] = e.weight
    weighted = any(e.weight != 1.0 for e in examples)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions, "labels": torch.from_numpy(labels),
            "weights": torch.from_numpy(weights) if weighted else None,
            "tokens": sum(len(e.ids) for e in examples)}


def length_batches(lengths: np.ndarray, token_budget: int, max_padding: float = 0.0) -> list[np.ndarray]:
    """Indices grouped longest-first: (batch size x longest length) stays within the budget, and a
    batch closes before padding would exceed `max_padding` of its tokens (padding is wasted work)."""
    order = np.argsort(-lengths, kind="stable")
    batches, current, longest, total = [], [], 0, 0
    for i in order:
        length = int(lengths[i])
        if current:
            width = longest * (len(current) + 1)
            if width > token_budget or 1 - (total + length) / width > max_padding:
                batches.append(np.asarray(current))
                current, total = [], 0
        if not current:
            longest = length
        current.append(i)
        total += length
    if current:
        batches.append(np.asarray(current))
    return batches


def planned_steps(settings: dict, n_examples: int) -> int:
    """`steps`, capped at `max_epochs` passes over the data (paper §1.8, with the real batch size)."""
    effective = settings["batch_size"] * settings["grad_accum"] * settings["processes"]
    cap = settings["max_epochs"] * n_examples // effective if settings["max_epochs"] else settings["steps"]
    return max(1, min(settings["steps"], cap))


def example_order(n: int, seed: int) -> Iterator[int]:
    """An endless stream of example indices: a fresh seeded permutation every epoch."""
    rng = np.random.default_rng(seed)
    while True:
        yield from rng.permutation(n)


def task_batches(examples: list[Encoded], batch_size: int, micro_batches: int, seed: int) -> Iterator[list[list[Encoded]]]:
    """The plain batch source: every step, `micro_batches` micro-batches of `batch_size` examples,
    drawn in a seeded order that reshuffles every epoch. A step's examples are grouped by length into its
    micro-batches (less padding; the step's gradient is the same sum over the same examples)."""
    order = example_order(len(examples), seed)
    while True:
        step = [examples[next(order)] for _ in range(batch_size * micro_batches)]
        if micro_batches > 1:
            step = sorted(step, key=lambda e: len(e.ids))  # stable: equal lengths keep their drawn order
        yield [step[i * batch_size:(i + 1) * batch_size] for i in range(micro_batches)]
