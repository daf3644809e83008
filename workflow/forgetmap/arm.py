"""A mitigation arm's run, one job: fine-tune under the arm (once per value of a swept knob), then judge
every fine-tune and its interpolations toward the base on the held-out set.

One process for all of it (a job per knob value or per α would import torch and transformers and load
the model again for seconds of work); each fine-tune is `forgetmap finetune`'s (forgetmap.train) and the
judging forgetmap.mitigation.evaluate's.
"""

from __future__ import annotations

from pathlib import Path


def arm_command(base: str, task: str, settings: dict, score_settings: dict, heldout: str, threads: int, out: str,
                scores: str, summary: str, replay: str | None = None, token_losses: str | None = None,
                matrix: str | None = None, split: str | None = None, shards: list[str] | None = None,
                alphas: list[float] | None = None) -> dict:
    """`forgetmap arm`: the checkpoint into `out` (a sweep: one directory per knob value inside it), the
    held-out scores of every fine-tune and interpolation into `scores`, their summary into `summary`."""
    from .mitigation.evaluate import judge
    from .mitigation.knobs import fine_tunes, label
    from .models import release_memory
    from .train import finetune

    runs = fine_tunes(settings)
    trained, tunes = [], []
    for knob, value, run in runs:
        into = out if len(runs) == 1 else str(Path(out) / label(knob, value))
        trained.append(finetune(base, task, run, threads, into, replay=replay, token_losses=token_losses,
                                matrix=matrix, split=split, heldout=heldout, shards=shards))
        tunes.append({"knob": knob, "value": value, "dir": into})
        release_memory()  # the training memory, before the next fine-tune or the judging loads models
    return {"finetune": trained[0] if len(trained) == 1 else trained,
            **judge(tunes, base, heldout, task, score_settings, alphas or [], threads, scores, summary)}
