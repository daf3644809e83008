"""Which cheap signal predicts a fine-tune's forgetting? Three, each measured without the upstream data:

- `kl_base`: KL(p_base ‖ p_θ) on the task's own validation responses, per target token, averaged over
  examples (the forward KL RL's Razor (Shenfeld et al., 2025) finds predicts forgetting);
- `weight_distance`: ‖θ − θ_base‖₂ over every parameter (LoRA: of the merged weights);
- `loss_drop`: the task's validation NLL under the base minus under the fine-tune (how much was learned).

`task_signals` measures the first two and the validation NLL in one pass over the validation set with
the base model beside the fine-tune; `predictor_table` fits each signal to the measured held-out forgetting
across runs (ordinary least squares R² and Spearman's ρ, over every run and within each task).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SIGNALS = ("kl_base", "weight_distance", "loss_drop")


def task_signals(model, base, encoded: list, pad_id: int, batch_size: int = 16) -> dict:
    """The validation NLL of `model` and its KL from `base` on `encoded` (the task's validation examples),
    each over an example's scored span (the response, as forgetmap.nll scores it) and averaged per token,
    then over examples; NaN without examples."""
    import torch
    import torch.nn.functional as F

    from ..data.batches import pad
    from .anchors import token_kl

    nll, kl = [], []
    device = next(model.parameters()).device
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start:start + batch_size]
        ids, mask = pad(chunk, pad_id)
        inputs = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
        with torch.no_grad():
            logits = model(**inputs, use_cache=False).logits
            reference = logits if base is model else base(**inputs, use_cache=False).logits  # the base judged: one pass
            for row, e in enumerate(chunk):
                if e.n_scored == 0:
                    continue
                at = slice(e.target_start - 1, e.score_end - 1)  # the positions predicting the scored tokens
                targets = inputs["input_ids"][row, e.target_start:e.score_end]
                nll.append(float(F.cross_entropy(logits[row, at].float(), targets)))
                kl.append(float(token_kl(logits[row, at], reference[row, at]).mean()))
    if not nll:
        return {"validation_nll": float("nan"), "kl_base": float("nan")}
    return {"validation_nll": float(np.mean(nll)), "kl_base": float(np.mean(kl))}


def weight_distance(model, base) -> float:
    """‖θ − θ_base‖₂ over the parameters both name (the same architecture)."""
    import torch

    reference = dict(base.named_parameters())
    with torch.no_grad():
        squared = sum(float(((p.float() - reference[n].float()).double() ** 2).sum())
                      for n, p in model.named_parameters() if n in reference)
    return squared ** 0.5


def _r2(x: np.ndarray, y: np.ndarray) -> float:
    """R² of the least-squares line of y on x (NaN with fewer than 3 points or a constant x)."""
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1] ** 2)


def predictor_table(frame: pd.DataFrame, target: str = "heldout_forgetting") -> pd.DataFrame:
    """Per signal: R² and Spearman ρ against `target` over every run, and the mean R² within a task (the
    signal ranking one task's fine-tunes, free of differences between tasks)."""
    from scipy.stats import spearmanr

    rows = []
    for signal in SIGNALS:
        if signal not in frame:
            continue
        x, y = frame[signal].to_numpy(np.float64), frame[target].to_numpy(np.float64)
        keep = np.isfinite(x) & np.isfinite(y)
        varies = keep.sum() >= 3 and np.ptp(x[keep]) > 0 and np.ptp(y[keep]) > 0  # else ρ is undefined
        rho = float(spearmanr(x[keep], y[keep]).statistic) if varies else float("nan")
        within = [_r2(g[signal].to_numpy(np.float64), g[target].to_numpy(np.float64))
                  for _, g in frame.groupby("task", sort=False)]
        rows.append({"signal": signal, "target": target, "runs": int(keep.sum()), "r2": _r2(x, y), "spearman": rho,
                     "r2_within_task": float(np.nanmean(within)) if np.isfinite(within).any() else float("nan")})
    return pd.DataFrame(rows)
