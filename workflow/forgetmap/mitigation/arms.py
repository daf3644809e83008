"""What a mitigation arm changes in fine-tuning: its batch source, and its examples' masks and weights.

`arm_batches` is the one seam between the arms and the training loop: it takes the task's encoded
training examples and returns the batch source and step count `train()` runs, plus what the arm did
(replayed examples, masked share). Plain fine-tuning (no arm, or the `none` arm) is the task's examples
alone, exactly as before; replay mixes the replayed upstream examples in (forgetmap.mitigation.replay);
token masks and example weights ride on the encoded examples (forgetmap.mitigation.tokens); self-generated
replay replaces the replayed texts by the base's own (forgetmap.mitigation.self_generated), and SDFT the task's
responses by the base's rewrites (forgetmap.mitigation.sdft). What an arm changes inside the training loop
(trained parameters, loss terms, weights) are its hooks (forgetmap.mitigation.knobs.arm_hooks).
"""

from __future__ import annotations

import time

import pandas as pd

from ..data.batches import planned_steps
from ..data.chat import Encoded
from .replay import mixture_batches

PLAIN = {"replay": "none", "tokens": "none", "weights": "none"}


def arm_batches(settings: dict, tokenizer, examples: list[Encoded], world: int, replay: str | None = None,
                token_losses: str | None = None, model=None, online: dict | None = None, task: str | None = None):
    """(batch source, steps, summary of what the arm did) for the fine-tune `settings` describe. An online
    replay arm's source measures `model` during training and reads the `online` files (matrix, split,
    heldout, shards); its summary fills in as it runs. Self-generated replay and SDFT generate with `model`
    (still the base) before training; SDFT rewrites the `task` file's training responses."""
    arm = settings.get("arm") or PLAIN
    summary: dict = {}
    if arm.get("targets", "original") == "sdft":
        from ..data.tasks import training_examples, training_frame
        from .sdft import distilled

        if model is None or task is None:
            raise ValueError(f"arm {arm.get('name')!r}: SDFT needs the base model and the task file")
        started = time.perf_counter()
        rewritten, facts = distilled(model, tokenizer, training_frame(task), arm["generation"], settings)
        examples = training_examples(tokenizer, task, settings["chat_template"], settings["max_length"], rewritten)
        summary.update(facts, generation_seconds=round(time.perf_counter() - started, 3))
    if arm["tokens"] != "none" or arm["weights"] != "none":
        from .tokens import flow_weights, random_masks, read_token_losses, stm_masks, weighted

        if token_losses is None:
            raise ValueError(f"arm {arm.get('name')!r} needs the base model's token losses (--token-losses)")
        losses = read_token_losses(token_losses, examples)
        if arm["tokens"] != "none":
            masked, share = stm_masks(examples, losses, arm["stm_mode"], arm["tau"], arm["q"])
            if arm["tokens"] == "stm_random":
                masked, share = random_masks(examples, masked, settings["seed"])
            examples = masked
            summary["masked_share"] = round(share, 6)
        if arm["weights"] == "flow":
            examples = weighted(examples, flow_weights([float(x.mean()) if len(x) else 0.0 for x in losses]))
    replayed: list[Encoded] = []
    if arm["replay"] != "none":
        from ..data.chat import encode_examples

        if replay is None:
            raise ValueError(f"arm {arm.get('name')!r} needs its replayed examples (--replay)")
        frame = pd.read_parquet(replay)
        if arm["replay"] == "self_generated":
            from .self_generated import self_generated

            if model is None:
                raise ValueError(f"arm {arm.get('name')!r}: self-generated replay needs the base model")
            started = time.perf_counter()
            frame, generated = self_generated(model, tokenizer, frame, arm, settings)
            summary.update(generated_tokens=summary.get("generated_tokens", 0) + generated,
                           generation_seconds=round(summary.get("generation_seconds", 0)
                                                    + time.perf_counter() - started, 3))
        replayed = encode_examples(tokenizer, frame, settings["chat_template"], settings["max_length"])
        summary["replayed"] = len(replayed)
        summary["replayed_tokens"] = int(sum(len(e.ids) for e in replayed))
    steps = planned_steps(settings, len(examples) + len(replayed))
    if arm["replay"] == "online":
        from .online import OnlineReplay

        if model is None or online is None or world > 1:
            raise ValueError(f"arm {arm.get('name')!r}: online replay needs the model, one process and its files "
                             f"(--matrix, --split, --heldout, --shards)")
        source = OnlineReplay(model, tokenizer, examples, replayed, frame["example_id"].astype(str).tolist(),
                              settings, online, steps)
        summary["online"] = source.facts  # filled in when the source switches, before the summary is written
        return source, steps, summary
    batches = mixture_batches(examples, replayed, settings["batch_size"], settings["grad_accum"] * world,
                              settings["seed"])
    return batches, steps, summary
