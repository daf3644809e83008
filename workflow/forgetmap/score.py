"""`forgetmap score`: one upstream shard under one model, in the scores contract (`example_id`, `nll`
float32, `n_tokens` int32, `n_bytes` int32: the UTF-8 bytes of the scored span, for bits per byte), with the
correctness of its items where it has any (forgetmap.correctness).

The NLL itself is forgetmap.nll's (the torch scorer, or vLLM's prompt log-probabilities); this module is
the job: read the shard, encode it as the model's tokenizer and template say, score, write, report.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


def _request_prompts(items: list, settings: dict) -> list[int]:
    """Each item's longest vLLM request as a prompt length, one output token left out: an option scored after
    its context, or a question with its whole answer budget (never past the model's positions)."""
    from .correctness import items as correctness

    limits = correctness.answer_budgets([it.context for it in items], settings)
    longest = [correctness.needed_tokens(it) - 1 - len(it.context) for it in items]  # 0: a generated answer
    return [len(it.context) + (option or int(b) - 1) for it, option, b in zip(items, longest, limits)]


def score_shard(model_dir: str, shard: str, settings: dict, threads: int, out: str, engines=None) -> dict:
    """Score every example of an upstream shard with one model and write the scores contract; where the
    shard has items with an answer, their correctness too (`forgetmap.correctness`), from the same model.
    `engines` (vllm backend, `engine.VllmEngines`): the job's engine, kept for its next checkpoint; without it
    the engine is this call's and is shut down after it. With `cells` in the settings (a fractional map's run,
    forgetmap.plan) only those cells are scored, and of them only those no earlier file of the run holds
    (`forgetmap.cells`)."""
    import pandas as pd

    from .io import write_table
    from .models import set_threads

    set_threads(threads)
    frame = pd.read_parquet(shard)
    if isinstance(settings.get("cells"), dict):  # a run's cells (the config's own `cells` is a number)
        from .cells import score_cells

        return score_cells(frame, settings, out, score_metadata(model_dir, settings, shard),
                           lambda part: score_frame(model_dir, part, settings, engines))
    table, summary = score_frame(model_dir, frame, settings, engines)
    write_table(table, out, score_metadata(model_dir, settings, shard))
    return summary


def score_metadata(model_dir: str, settings: dict, shard: str) -> dict:
    """What a score file records of how it was made: the model's directory and identity (forgetmap.pretrained), a
    digest of its scoring settings (the cells aside) and the shard's file name (named by its definition): what tells
    whether its scores may be read again."""
    from .io import definition_key
    from .pretrained import identity

    return {"model_dir": str(model_dir), "backend": settings["backend"], "identity": identity(model_dir),
            "settings": definition_key({k: v for k, v in settings.items() if k != "cells"}),
            "shard": Path(shard).name}


def score_frame(model_dir: str, frame, settings: dict, engines=None):
    """(the scores table of `frame`'s examples, the job's summary): `score_shard`'s work on examples in memory."""
    import pyarrow as pa

    from .correctness import items as correctness
    from .correctness import sampled
    from .correctness.prompts import asked, shown
    from .data.chat import encode_examples, scored_bytes, truncation
    from .models import load_model, load_tokenizer, pick_device, pick_dtype, tokenizer_choices
    from .engine import VllmEngines, engine_failures, vllm_lengths
    from .nll import TorchScorer, model_positions, score_with_vllm

    tokenizer = load_tokenizer(model_dir)
    max_length = settings["max_length"]
    encoded = encode_examples(tokenizer, frame, settings["chat_template"], max_length)
    positions = model_positions(model_dir)
    item_settings = {**settings["correctness"], "chat_template": settings["chat_template"],
                     "shots": settings.get("shots", 0), "ask": settings.get("ask"), "row": settings.get("row"),
                     "positions": positions, "token_budget": settings["token_budget"]}
    is_sampled = item_settings.get("answers") == "sampled"  # Harmon et al.: answers sampled over seeds
    encode = sampled.encode_questions if is_sampled else correctness.encode_items
    rows, items = encode(tokenizer, frame, item_settings)
    correctness.check_room(frame, rows, items, positions, item_settings)  # before any result is computed
    start = time.perf_counter()
    if settings["backend"] == "vllm":
        import torch

        from .models import say_device

        say_device("cuda" if torch.cuda.is_available() else "cpu")  # the engine's: a GPU where one is visible
        lengths = [len(e.ids) for e in encoded]
        max_model_len, fits = vllm_lengths(lengths + _request_prompts(items, item_settings), positions)
        if max(lengths) > fits:  # a prompt must leave room for one output token within the model's positions
            log.warning("the vllm backend scores at most %d tokens on this %d-position model: longer examples are "
                        "cut as max_length cuts them", fits, max_model_len)
            max_length = min(max_length, fits)
            encoded = encode_examples(tokenizer, frame, settings["chat_template"], max_length)
        own = engines is None
        engines = VllmEngines() if own else engines
        try:
            llm = engines.engine(model_dir, max_model_len, settings, seeded=is_sampled)
            with engine_failures(model_dir):
                nll = score_with_vllm(llm, encoded)
                n_tokens = np.array([e.n_scored for e in encoded], dtype=np.int32)
                scored = time.perf_counter()
                record = None
                if items:
                    record = (sampled.evaluate_vllm(llm, items, item_settings) if is_sampled
                              else correctness.evaluate_vllm(llm, tokenizer, items, item_settings))
        finally:
            if own:
                engines.close()
    else:
        device = pick_device(settings["device"])
        model = load_model(model_dir, device, pick_dtype(settings["dtype"], device), settings["attention"])
        scorer = TorchScorer(model, tokenizer.pad_token_id, settings["token_budget"], settings["max_padding"],
                             packing=settings.get("packing", False))  # the key is there only where packing is on
        record = None
        if not items:
            nll, n_tokens = scorer.score(encoded)
            scored = time.perf_counter()
        elif is_sampled:
            nll, n_tokens = scorer.score(encoded)
            scored = time.perf_counter()
            record = sampled.evaluate_torch(model, tokenizer, items, item_settings)
        else:
            nll, n_tokens, is_greedy = scorer.score_greedy(encoded)
            scored = time.perf_counter()
            # a free-form item whose scored answer is already the greedy continuation is not decoded
            known = correctness.greedy_from_scores(
                items, [encoded[r] for r in rows], is_greedy[rows], tokenizer.eos_token_id,
                correctness.answer_budgets([it.context for it in items], item_settings))
            record = correctness.evaluate_torch(model, tokenizer, items, item_settings, scorer, known)
    finished = time.perf_counter()
    columns = {"example_id": pa.array(frame["example_id"].astype(str)),
               "nll": pa.array(nll, pa.float32()), "n_tokens": pa.array(n_tokens, pa.int32()),
               "n_bytes": pa.array(scored_bytes(tokenizer, encoded), pa.int32())}
    if "answer" in frame:
        columns.update(correctness.item_columns(len(frame), rows, record))
    elapsed = scored - start
    summary = {"examples": len(frame), "tokens": int(n_tokens.sum()), "nan": int(np.isnan(nll).sum()),
               "seconds": round(elapsed, 3), "tokens_per_s": round(float(n_tokens.sum()) / max(elapsed, 1e-9), 1)}
    if items:
        summary.update(items=len(items), items_correct=int(record["correct"].sum()),
                       correctness_seconds=round(finished - scored, 3), asked=asked(item_settings),
                       prompts=shown(tokenizer, frame, rows, [it.context for it in items]))
        if is_sampled:
            summary.update(seeds=item_settings["seeds"], generated_tokens=int(record["n_generated"].sum()),
                           unextracted=int(sum(a is None for row in record["answers"] for a in row)),
                           capped=int(record["n_capped"].sum()))
    summary.update(**truncation(encoded, max_length, "upstream examples"),
                   **tokenizer_choices(tokenizer, settings["chat_template"]))
    if summary["nan"]:
        log.warning("%d of %d examples have an empty scored span (NaN)", summary["nan"], len(frame))
    return pa.table(columns), summary
