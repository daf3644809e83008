"""Examples packed into rows without attention across them: padding-free scoring and fine-tuning.

A row holds examples one after another, each with positions restarting at 0, and is given to the model with
`position_ids` and no attention mask. transformers then keeps the examples apart itself: its mask builder
reads each example's start from the positions (`masking_utils.find_packed_sequence_indices`: a block-causal
mask for sdpa and eager attention; flash-attention's variable-length kernel where the batch is one row, which
`Layout(flat=True)` makes), and rotary or learned
positions come from the same `position_ids`. An architecture whose forward builds its mask or its positions
otherwise (ALiBi from the attention mask, positions counted from padding) would let examples see each other:
packing is offered only for the architectures in PACKABLE, each checked in the tests (a packed example's
NLL equals the same example alone, to 1e-5 in fp32), and refused at planning for any other.

Rows are as wide as the longest example scored and filled best-fit, longest first, so a row's waste is its
tail alone; an example is never split across rows.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

    from .chat import Encoded

# model_type of the transformers architectures whose mask and positions follow `position_ids`, each checked in
# tests/unit/test_packing (OPT, which counts its learned positions from the attention mask, is not: the test shows it)
PACKABLE = frozenset({"llama", "mistral", "mixtral", "olmo", "olmo2", "olmo3", "olmoe", "gpt_neox", "gpt2", "gptj",
                      "gpt_bigcode", "codegen", "qwen2", "qwen2_moe", "qwen3", "gemma", "gemma3_text", "phi", "phi3",
                      "starcoder2", "stablelm", "granite", "cohere"})


def rows_of(lengths: list[int] | np.ndarray, width: int) -> list[list[int]]:
    """Indices into rows of at most `width` tokens, in the order given: each row takes examples until the next
    does not fit (the rows `packed_batches` planned, read back from a batch's order)."""
    rows: list[list[int]] = []
    room = 0
    for i, length in enumerate(lengths):
        length = int(length)
        if not rows or length > room:
            rows.append([i])
            room = width - length
        else:
            rows[-1].append(i)
            room -= length
    return rows


def packed_batches(lengths: np.ndarray, token_budget: int) -> list[np.ndarray]:
    """Indices grouped into batches of rows as wide as the longest example, as many rows as the token budget
    holds (at least one); each row is filled with the longest examples left that fit in it (best fit, longest
    first), so short examples fill the tails long ones leave. A batch lists its rows' examples row after row,
    which `rows_of` reads back at that width."""
    pool = sorted((int(length), i) for i, length in enumerate(lengths))  # ascending: the longest last
    keys = [length for length, _ in pool]
    width = max(keys, default=1)
    batches: list[np.ndarray] = []
    while pool:
        batch: list[int] = []
        for _ in range(max(1, token_budget // width)):
            room = width
            while pool:
                at = bisect.bisect_right(keys, room) - 1  # the longest example left that fits
                if at < 0:
                    break
                length, i = pool.pop(at)
                keys.pop(at)
                batch.append(i)
                room -= length
            if not pool:
                break
        batches.append(np.asarray(batch, dtype=np.int64))
    return batches


class Layout:
    """Where each member of a batch sits once packed into rows of `width` (default: its longest member's): its row,
    its first column, and the tensors the model takes (`ids` rows x width, `position_ids` restarting at every
    example and at the padding that ends a row). `flat`: every member in one row without padding, as
    flash-attention's variable-length path takes packed examples (transformers reads them from the position ids
    of a batch of one row only; with more rows its kernel would attend across examples)."""

    def __init__(self, members: list[Encoded], pad_id: int, width: int | None = None, flat: bool = False):
        import torch

        lengths = [len(e.ids) for e in members]
        width = sum(lengths) if flat else max(lengths) if width is None else width
        rows = [list(range(len(members)))] if flat else rows_of(lengths, width)
        self.row = np.zeros(len(members), dtype=np.int64)
        self.offset = np.zeros(len(members), dtype=np.int64)
        ids = np.full((len(rows), width), pad_id, dtype=np.int64)
        positions = np.zeros((len(rows), width), dtype=np.int64)
        for r, row in enumerate(rows):
            column = 0
            for i in row:
                n = lengths[i]
                ids[r, column:column + n] = members[i].ids
                positions[r, column:column + n] = np.arange(n)
                self.row[i], self.offset[i] = r, column
                column += n
            positions[r, column:] = np.arange(width - column)  # the padding: an example of its own, seen by none
        self.tokens = int(sum(lengths))
        self.ids = torch.from_numpy(ids)
        self.position_ids = torch.from_numpy(positions)


def refusal(model: str, model_type: str | None, key: str) -> str | None:
    """Why `key` (a packing setting) cannot be true for this model, or None where it can."""
    if model_type in PACKABLE:
        return None
    return (f"{key}: true packs examples into rows, but model {model!r} is of type {model_type or 'unknown'!r}, "
            f"whose attention is not known to keep packed examples apart (packing is checked for "
            f"{', '.join(sorted(PACKABLE))}): set it to false")


def model_inputs(batch: dict) -> dict:
    """The model's inputs of a collated batch: ids, and the attention mask or (packed) the position ids; no
    key-value cache (transformers reads packed examples from the position ids only where there is none)."""
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
            "position_ids": batch.get("position_ids"), "use_cache": False}
