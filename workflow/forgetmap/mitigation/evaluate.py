"""An arm's run judged: its checkpoint's NLL on the held-out upstream examples, its loss on the task.

The held-out examples are scored exactly as the forgetting matrix scores upstream shards (same
backend, spans and settings), so ΔNLL against the matrix's base NLL is the forgetting the arm caused.
The target side is the mean NLL of the task's validation responses. The checkpoint's training summary
(steps, tokens, seconds, replayed examples, masked share) travels along for the cost figures.

`evaluate_command` judges a checkpoint: an arm's (inside its run, forgetmap.arm) or the matrix's own
plain fine-tune (a job of its own).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def validation_nll(model_dir: str, task: str, settings: dict, threads: int) -> float:
    """Mean over the task's validation examples of each response's mean NLL (NaN without any)."""
    import pandas as pd
    import torch

    from ..data.chat import encode_chat
    from ..models import load_model, load_tokenizer, pick_device, set_threads
    from ..nll import TorchScorer

    frame = pd.read_parquet(task)
    frame = frame[frame["split"] == "validation"]
    if frame.empty:
        return float("nan")
    set_threads(threads)
    tokenizer = load_tokenizer(model_dir)
    device = pick_device(settings["device"])
    model = load_model(model_dir, device, torch.float32 if device.type == "cpu" else torch.bfloat16)
    encoded = encode_chat(tokenizer, frame["prompt"].tolist(), frame["response"].tolist(),
                          settings["chat_template"], settings["max_length"])
    nll, _ = TorchScorer(model, tokenizer.pad_token_id, settings["token_budget"]).score(encoded)
    return float(np.nanmean(nll))


def evaluate_command(model_dir: str, heldout: str, task: str, settings: dict, threads: int, out: str,
                     summary: str) -> dict:
    """`forgetmap evaluate-arm`: held-out scores (the scores contract) and a JSON summary."""
    from ..io import atomic_path
    from ..score import score_shard

    scored = score_shard(model_dir, heldout, settings, threads, out)
    training = json.loads((Path(model_dir) / "train_summary.json").read_text())
    result = {"validation_nll": validation_nll(model_dir, task, settings, threads), "heldout": scored["examples"],
              **{k: training.get(k) for k in ("steps", "tokens", "seconds", "examples", "replayed",
                                               "replayed_tokens", "masked_share", "online")}}
    with atomic_path(summary) as tmp:
        tmp.write_text(json.dumps(result, indent=1))
    return result
