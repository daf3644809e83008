"""The base model of a run: pretrained from scratch on the demo corpus, or a pointer to real weights; and
the pointer of a checkpoint forgetmap did not train (a public post-trained model, a row of its own).

The demo's base sees its pretraining corpus (the first `n_examples` of the demo generator, the
same examples the upstream corpus scores, as in the paper) with the loss on every token. Its
tokenizer is trained on that corpus alone, so adding tasks never changes the base model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .data import demo
from .data.chat import Encoded, chat_pieces, encode_examples
from .io import atomic_path
from .models import (build_demo_model, n_parameters, pick_device, save_model, set_threads, train_demo_tokenizer,
                     write_pointer)
from .data.batches import task_batches
from .nll import TorchScorer
from .train import train


class _Markers:
    """Stand-in tokenizer for rendering chat text before the real tokenizer exists."""

    eos_token = "<|endoftext|>"


def pretraining_texts(corpus) -> list[str]:
    texts = []
    for row in corpus.itertuples():
        if row.kind == "lm":
            texts.append(row.text)
        else:
            texts.append("".join(chat_pieces(_Markers, row.prompt, row.response, "olmo")))
    return texts


def pretrain_demo(settings: dict, out: str, threads: int) -> dict:
    """Train the demo tokenizer and model; the log shows the upstream NLL falling."""
    set_threads(threads)
    corpus = demo.upstream_corpus(settings["n_examples"], settings["corpus_seed"])
    tokenizer = train_demo_tokenizer(pretraining_texts(corpus), settings["vocab_size"])
    encoded = encode_examples(tokenizer, corpus, "olmo", settings["max_length"])
    # pretraining learns every token (prompt and markers too); scoring keeps the contract's spans
    examples = [Encoded(e.ids, 1, len(e.ids)) for e in encoded]
    model = build_demo_model(tokenizer, settings["architecture"], settings["seed"]).to(pick_device(settings["device"]))
    probe = np.random.default_rng(settings["seed"]).choice(len(encoded), min(256, len(encoded)), replace=False)
    probe_set = [encoded[i] for i in np.sort(probe)]
    scorer = TorchScorer(model, tokenizer.pad_token_id)

    def evaluate(step: int) -> dict:
        if step % settings["eval_every"] and step != planned:
            return {}
        model.eval()
        nll, _ = scorer.score(probe_set)
        model.train()
        return {"upstream_nll": round(float(np.nanmean(nll)), 5)}

    planned = settings["steps"]
    initial = evaluate(0)["upstream_nll"] if settings["eval_every"] else None
    with atomic_path(out, directory=True) as tmp:
        # the demo base trains as fine-tuning does by default: bf16 autocast on CUDA, no checkpointing
        summary = train(model, task_batches(examples, settings["batch_size"], 1, settings["seed"]), planned,
                        {**settings, "bf16": True, "gradient_checkpointing": False}, tokenizer.pad_token_id,
                        tmp / "pretrain_log.jsonl", on_step=evaluate)
        save_model(model, tmp)
        tokenizer.save_pretrained(tmp)
        final = evaluate(planned)["upstream_nll"]
        summary.update(parameters=n_parameters(model), upstream_nll_initial=initial, upstream_nll_final=final,
                       vocab_size=len(tokenizer))
        (tmp / "pretrain_summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def base_command(settings: dict, threads: int, out: str) -> dict:
    """`forgetmap base-model`: pretrain the demo base, or point to real weights."""
    if settings["kind"] == "demo":
        return pretrain_demo(settings, out, threads)
    return link_pretrained(settings["path"], out, settings["revision"], settings.get("local"), settings.get("identity"))


def checkpoint_command(settings: dict, out: str) -> dict:
    """`forgetmap checkpoint`: a pointer to a checkpoint's files, as planning found them (its identity
    checked again: weights replaced since planning fail here instead of being scored)."""
    return link_pretrained(settings["path"], out, settings["revision"], settings["local"], settings["identity"])


def link_pretrained(source: str, out: str, revision: str | None = None, local: str | None = None,
                    identity: str | None = None) -> dict:
    """A base pointer to weights the user's environment provides: the local directory or cached HF id that
    planning found (`local`) and its identity, checked again here (the files may have changed since)."""
    from .errors import ForgetmapError
    from .pretrained import identity as identity_of
    from .pretrained import locate

    if local is None:
        local = str(locate(source, revision, "base.path"))
    if identity is not None and identity_of(Path(local)) != identity:
        raise ForgetmapError(f"{local}: the model's files changed since the workflow was planned; rerun it")
    with atomic_path(out, directory=True) as tmp:
        write_pointer(tmp, source, revision, local=local, identity=identity or identity_of(Path(local)))
    return {"path": source, "revision": revision, "local": local}
