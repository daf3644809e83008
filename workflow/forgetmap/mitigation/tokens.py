"""Token masks and example weights from the base model's losses on a task (no replay).

- STM (Wu et al., NeurIPS 2025): a response token whose base-model perplexity exp(NLL) exceeds τ
  carries no loss (`abs`, τ = 2.5), or exactly the share q of the task's response tokens with the
  highest base NLL (`quantile`, q = 0.2; ties go to the earlier token). The token stays in the input; only its label goes.
- `random_masks`: the control: the same number of masked tokens in each example, at random positions.
- FLOW (Sanyal et al., ICML 2025): each task example weighted by exp(-loss_base / τ), with τ the
  median of the examples' base losses (so the median example weighs e^-1 before normalising); the
  weights are scaled to mean 1, so the loss stays on the scale of plain fine-tuning.

Token losses are per example over its target positions [target_start, len(ids)) (the response and
the closing EOS), as `TorchScorer.score_tokens` returns them for examples scored to their end.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..data.chat import Encoded


def stm_masks(examples: list[Encoded], token_nll: list[np.ndarray], mode: str = "quantile", tau: float = 2.5,
              q: float = 0.2) -> tuple[list[Encoded], float]:
    """The examples with STM loss masks, and the share of target tokens masked."""
    if mode == "abs":
        return _masked(examples, [nll > np.log(tau) for nll in token_nll])  # exp(nll) > τ  <=>  nll > log τ
    if mode != "quantile":
        raise ValueError(f"unknown STM mode {mode!r}; allowed: abs, quantile")
    flat = np.concatenate(token_nll) if token_nll else np.zeros(0, np.float32)
    drop = np.zeros(len(flat), dtype=bool)
    drop[np.argsort(-flat, kind="stable")[:int(round(q * len(flat)))]] = True  # exactly the top q, ties in order
    return _masked(examples, np.split(drop, np.cumsum([len(x) for x in token_nll])[:-1]))


def random_masks(examples: list[Encoded], like: list[Encoded], seed: int) -> tuple[list[Encoded], float]:
    """The control of `like` (masked examples): as many masked target tokens per example, at random."""
    rng = np.random.default_rng(seed)
    drops = []
    for e, masked in zip(examples, like):
        n_targets = len(e.ids) - e.target_start
        drop = np.zeros(n_targets, dtype=bool)
        drop[rng.choice(n_targets, n_targets - masked.n_targets, replace=False)] = True
        drops.append(drop)
    return _masked(examples, drops)


def _masked(examples: list[Encoded], drops: list[np.ndarray]) -> tuple[list[Encoded], float]:
    out, dropped, total = [], 0, 0
    for e, drop in zip(examples, drops):
        if len(drop) != len(e.ids) - e.target_start:
            raise ValueError(f"{len(drop)} token losses for an example of {len(e.ids) - e.target_start} targets")
        mask = np.ones(len(e.ids), dtype=bool)
        mask[e.target_start:] = ~drop
        out.append(replace(e, loss_mask=mask))
        dropped, total = dropped + int(drop.sum()), total + len(drop)
    return out, dropped / max(1, total)


def flow_weights(example_losses: np.ndarray, tau: float | None = None) -> np.ndarray:
    """exp(-loss / τ) per example, τ the median loss unless given, scaled to mean 1."""
    losses = np.asarray(example_losses, dtype=np.float64)
    tau = float(np.median(losses)) if tau is None else tau
    if not tau > 0:
        raise ValueError(f"FLOW needs a positive temperature; the examples' median base loss is {tau}")
    weights = np.exp(-(losses - losses.min()) / tau)  # shifted for range; the scale cancels below
    return weights / weights.mean()


def weighted(examples: list[Encoded], weights: np.ndarray) -> list[Encoded]:
    return [replace(e, weight=float(w)) for e, w in zip(examples, weights)]


def token_losses_command(base: str, task: str, settings: dict, threads: int, out: str) -> dict:
    """`forgetmap token-losses`: the base model's NLL of every training target token of a task, per
    example in training order (the same tokenisation as fine-tuning), computed once per (model, task)."""
    import pyarrow as pa
    import torch

    from ..data.tasks import training_examples
    from ..io import write_table
    from ..models import load_model, load_tokenizer, pick_device, set_threads
    from ..nll import TorchScorer

    set_threads(threads)
    tokenizer = load_tokenizer(base)
    examples = training_examples(tokenizer, task, settings["chat_template"], settings["max_length"])
    device = pick_device(settings["device"])
    model = load_model(base, device, torch.float32)
    scorer = TorchScorer(model, tokenizer.pad_token_id, settings["token_budget"])
    losses = scorer.score_tokens([replace(e, score_end=len(e.ids)) for e in examples])  # targets to the EOS
    table = pa.table({"example": pa.array(np.arange(len(examples)), pa.int32()),
                      "nll": pa.array([x.astype(np.float32) for x in losses], pa.list_(pa.float32()))})
    write_table(table, out, {"task": str(task), "chat_template": settings["chat_template"],
                             "max_length": settings["max_length"]})
    flat = np.concatenate(losses) if losses else np.zeros(0)
    return {"examples": len(examples), "tokens": int(len(flat)), "mean_nll": float(flat.mean()) if len(flat) else None,
            "share_above_2.5": float((np.exp(flat) > 2.5).mean()) if len(flat) else None}


def read_token_losses(path: str, examples: list[Encoded]) -> list[np.ndarray]:
    """The token losses of `examples` (as `token_losses_command` wrote them), checked to match."""
    import pyarrow.parquet as pq

    from ..errors import DataError

    column = pq.read_table(path, columns=["nll"]).column("nll").to_pylist()
    losses = [np.asarray(x, dtype=np.float32) for x in column]
    if len(losses) != len(examples) or any(len(x) != len(e.ids) - e.target_start for x, e in zip(losses, examples)):
        raise DataError(f"{path}: its token losses do not match the task's encoded training examples "
                        f"(another tokenizer, template or max_length): rebuild it")
    return losses
