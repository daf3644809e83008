"""A mitigation arm's run, one job: fine-tune under the arm, then judge the checkpoint on the held-out set.

One process for both (a second job would import torch and transformers and load the model again for
seconds of work); the fine-tune is `forgetmap finetune`'s (forgetmap.train) and the judging
`forgetmap evaluate-arm`'s (forgetmap.mitigation.evaluate), unchanged.
"""

from __future__ import annotations


def arm_command(base: str, task: str, settings: dict, score_settings: dict, heldout: str, threads: int, out: str,
                scores: str, summary: str, replay: str | None = None, token_losses: str | None = None,
                matrix: str | None = None, split: str | None = None, shards: list[str] | None = None) -> dict:
    """`forgetmap arm`: the checkpoint into `out`, its held-out scores into `scores`, the summary (validation
    NLL, training figures) into `summary`."""
    from .mitigation.evaluate import evaluate_command
    from .models import release_memory
    from .train import finetune

    trained = finetune(base, task, settings, threads, out, replay=replay, token_losses=token_losses, matrix=matrix,
                       split=split, heldout=heldout, shards=shards)
    release_memory()  # the training memory, before the judging loads the checkpoint (or starts a vLLM engine)
    return {"finetune": trained, **evaluate_command(out, heldout, task, score_settings, threads, scores, summary)}
