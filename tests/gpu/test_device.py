"""The device tier (`pytest -m gpu`): what forgetmap promises of a GPU, measured on the device at hand.

With CUDA (one command on a GPU machine: `pytest -m gpu`, docs/gpu.md) every test runs on the GPU at real
widths: an OLMo-2 1B-shaped model (hidden 2,048, 16 layers, vocabulary 100,352, 1.48 B parameters) with
random weights saved as a user's checkpoint, scoring also at 7B built on the device. Without CUDA the same
tests run on the CPU at tiny widths in CI, so their code runs every time. Each job kind's peak against its
estimate (`torch.cuda.max_memory_allocated` on a GPU; on the CPU the allocator's bytes, tests/peaks.py),
bf16 against fp32 NLL, batch invariance, sampled answers by seed, and forgetmap against a plain Hugging
Face loop, transformers' `Trainer` and `generate`: their outputs checked, their speed printed for
BENCHMARKS.md (`-s` shows it).
"""

from __future__ import annotations

import gc
import json
import os
import time
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest
import torch

from standins import TULU_TEMPLATE, sentences, train_tokenizer

pytestmark = pytest.mark.gpu

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
OLMO2_VOCAB = 100352
# OLMo-2 1B's widths on a GPU; on the CPU a tiny OLMo-2 at the same vocabulary (every term that scales with it)
WIDTHS = (dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=16,
               num_key_value_heads=16) if CUDA else
          dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
               num_key_value_heads=2))
SEVEN_B = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=32)
ROWS = (256, 1024, 2048, 4096) if CUDA else (256, 1024)  # scored row lengths
BUDGET = 16384 if CUDA else 2048  # scoring's token budget
SCORE_DTYPE = torch.bfloat16 if CUDA else torch.float32


def olmo2_config(widths, **token_ids):
    """OLMo-2's config at `widths`: its vocabulary, 4,096 positions, an untied head."""
    from transformers import Olmo2Config

    return Olmo2Config(vocab_size=OLMO2_VOCAB, max_position_embeddings=4096, tie_word_embeddings=False,
                       **token_ids, **widths)


def olmo2(directory, widths=WIDTHS, dtype=torch.bfloat16):
    """An OLMo-2 model of `widths` with random weights, saved as a user's checkpoint with a tokenizer."""
    from transformers import Olmo2ForCausalLM

    tokenizer = train_tokenizer("olmo2", TULU_TEMPLATE, 2000)
    config = olmo2_config(widths, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                          bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = Olmo2ForCausalLM(config).to(dtype)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    del model
    return directory


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return olmo2(tmp_path_factory.mktemp("olmo2") / "model")


@contextmanager
def device_peak():
    """Yields a dict whose 'peak' is, on exit, the most bytes the work held above where it began: torch's
    allocator on a GPU ('reserved' too), glibc's on the CPU (tests/peaks.py)."""
    gc.collect()
    if not CUDA:
        from peaks import peak_bytes

        with peak_bytes() as found:
            yield found
        return
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    found: dict = {}
    yield found
    torch.cuda.synchronize()
    found["peak"] = torch.cuda.max_memory_allocated() - start
    found["reserved"] = torch.cuda.max_memory_reserved()


def loaded(directory, dtype=SCORE_DTYPE):
    from forgetmap.models import load_model

    model = load_model(directory, DEVICE, dtype, "sdpa")
    if not CUDA:
        with torch.no_grad():  # out of the checkpoint's file mapping into the heap, as a GPU holds them
            for parameter in model.parameters():
                parameter.data = parameter.data.clone()
    return model


def random_examples(length: int, n: int, seed: int = 0):
    from forgetmap.data.chat import Encoded

    rng = np.random.default_rng(seed)
    return [Encoded(ids=rng.integers(5, OLMO2_VOCAB - 1, length), target_start=1, score_end=length) for _ in range(n)]


def report(name: str, **figures) -> None:
    print(json.dumps({"device": torch.cuda.get_device_name() if CUDA else "cpu", "test": name, **figures}))


# --- the workflow on the device -----------------------------------------------------------------------------

def test_the_tiny_config_runs_every_model_stage_on_the_device(request, tmp_path):
    """The tests' tiny config through Snakemake: each job of a model stage (the base's pretraining, every
    fine-tune, every score shard, gradient similarity) says in its log that it ran on the device. On a GPU:
    `gpu: 1` for those stages, up to eight GPU jobs sharing the one visible device, semantic similarity off
    and the greedy scheduler (MiniLM's weights package and pulp may be absent from a machine without
    internet); on the CPU: the suite's shared tiny run."""
    from helpers import make_workdir, snakemake, tiny_config

    if CUDA:
        config = tiny_config()
        spec = config["models"]["tiny"]
        for stage in ("base", "finetune", "score", "gradient"):
            spec["resources"][stage]["gpu"] = 1
        spec["correlations"].update(device="auto", semantic=False)
        spec["base"]["device"] = "auto"  # the demo base pretrains on the CPU by default
        workdir = make_workdir(tmp_path / "wf", config)
        started = time.perf_counter()
        # every core of a GPU machine, up to 8 GPU jobs at once on the one device (tiny models: their time is
        # process start-up; the H200's run took 177 s on 12 cores with 4)
        snakemake(workdir, "--resources", "gpu=8", "--scheduler", "greedy", ncores=os.cpu_count() or 1,
                  env={"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]})
        report("the tiny config through Snakemake", seconds=round(time.perf_counter() - started))
    else:
        workdir = request.getfixturevalue("tiny_run")
    logs = workdir / "results/logs/tiny"
    stages = {"base": [logs / "base_model.log"], "finetune": sorted((logs / "finetune").glob("*.log")),
              "score": sorted((logs / "score").glob("*/shard-*.log")), "gradient": [logs / "gradient_similarity.log"]}
    for stage, paths in stages.items():
        assert paths and all(p.exists() for p in paths), stage
        for path in paths:
            devices = {line.split("device: ")[1].split()[0] for line in path.read_text().splitlines()
                       if "device: " in line}
            assert devices == {DEVICE.type}, (path, devices)


# --- memory: each job kind's peak against its estimate -------------------------------------------------------

@pytest.mark.skipif(not CUDA and __import__("peaks").LIBC is None, reason="needs glibc's mallinfo2 (2.33 or later)")
def test_score_generation_and_gradient_peaks_are_within_their_stated_ratio_of_the_estimate(checkpoint):
    """Scoring from a new scorer (its first batch's head check included) at each row length, generation (its
    prefill leading, then its last decode step), the gradient job: each peak beyond the weights within
    0.9-1.15 of the estimate traced on the meta device (docs/gpu.md states the ratios)."""
    from forgetmap.generation import generate_torch
    from forgetmap.gradients import projected_gradients
    from forgetmap.anatomy import shape
    from forgetmap.memory import generation_need, gradient_need, score_need
    from forgetmap.models import load_tokenizer
    from forgetmap.nll import TorchScorer

    size, dtype = shape(checkpoint), str(SCORE_DTYPE).removeprefix("torch.")
    tokenizer = load_tokenizer(checkpoint)
    prompts = [e.ids[:256 - 4 * i] for i, e in enumerate(random_examples(256, 16, 1))]
    runs = {
        **{f"scoring rows of {length}": (
            lambda model, length=length: TorchScorer(model, 0, BUDGET).score(random_examples(length, 2 * BUDGET // length)),
            score_need(size, dtype, BUDGET, length), SCORE_DTYPE) for length in ROWS},
        "generation, prompts leading": (
            lambda model: generate_torch(model, tokenizer, prompts, np.full(16, 32), token_budget=16 * 288),
            generation_need(size, dtype, 16, 256, 32, 16 * 288), SCORE_DTYPE),
        "generation, answers leading": (
            lambda model: generate_torch(model, tokenizer, [p[:32 - i] for i, p in enumerate(prompts)],
                                         np.full(16, 224), token_budget=16 * 256),
            generation_need(size, dtype, 16, 32, 224, 16 * 256), SCORE_DTYPE),
        # fp32; on the CPU attention's backward takes the math path, on a GPU the fused kernel
        "gradient": (lambda model: projected_gradients(model, random_examples(256, 2), 64),
                     gradient_need(size, 256, 64, fused_attention=CUDA), torch.float32),
    }
    for name, (run, need, weights_dtype) in runs.items():
        _within_estimate(name, loaded(checkpoint, weights_dtype), run, need)


def _within_estimate(name, model, run, need):
    """`run(model)`'s peak beyond the weights (loaded before) within 0.9-1.15 of what `need` puts beside them."""
    estimate = sum(v for k, v in need.terms.items() if k != "weights")
    with device_peak() as found:
        run(model)
    ratio = found["peak"] / estimate
    report(name, peak_gib=round(found["peak"] / 2**30, 3), estimate_gib=round(estimate / 2**30, 3),
           ratio=round(ratio, 3), leading=[k for k in need.terms if k != "weights"])
    assert 0.9 <= ratio <= 1.15, (name, found, need.terms)
    assert "head_check" not in need.terms  # the first batch's check costs less than a scoring batch


@pytest.mark.skipif(not CUDA and __import__("peaks").LIBC is None, reason="needs glibc's mallinfo2 (2.33 or later)")
def test_scoring_a_model_built_on_the_device_is_within_its_stated_ratio_at_7b():
    """OLMo-2 7B's widths on a GPU (6.9 B parameters, built in bf16 on the device with random weights, never
    saved), on the CPU a tiny OLMo-2 with grouped-query attention: scoring from a new scorer at each row
    length, its first batch's check included, within 0.9-1.15 of the estimate traced from its config (the
    H200 measured 1.07-1.60 at 7B before the check was read on a prefix)."""
    from transformers import Olmo2ForCausalLM

    from forgetmap.anatomy import shape
    from forgetmap.memory import score_need
    from forgetmap.nll import TorchScorer

    config = olmo2_config(SEVEN_B if CUDA else dict(hidden_size=192, intermediate_size=512, num_hidden_layers=3,
                                                    num_attention_heads=6, num_key_value_heads=2))
    default = torch.get_default_dtype()
    torch.set_default_dtype(SCORE_DTYPE)  # built in the scoring dtype: no fp32 copy of 7B on the device
    try:
        torch.manual_seed(0)
        with torch.device(DEVICE):
            model = Olmo2ForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)
    size, dtype = shape(config), str(SCORE_DTYPE).removeprefix("torch.")
    for length in ROWS:
        _within_estimate(f"scoring rows of {length}, {size.parameters / 1e9:.2f} B parameters", model,
                         lambda model, length=length: TorchScorer(model, 0, BUDGET).score(
                             random_examples(length, 2 * BUDGET // length)),
                         score_need(size, dtype, BUDGET, length))


FINETUNES = {  # kind: (method, gradient checkpointing, arm)
    "full": ("full", False, None),
    "full, checkpointing": ("full", True, None),
    "lora": ("lora", False, None),
    "kl_base": ("full", False, {"kl_base": 0.1}),
    "l2_sp": ("full", False, {"l2_sp": 0.1}),
    "ema": ("full", False, {"ema": 0.9}),
}


@pytest.mark.skipif(not CUDA and __import__("peaks").LIBC is None, reason="needs glibc's mallinfo2 (2.33 or later)")
@pytest.mark.parametrize("kind", sorted(FINETUNES))
def test_a_fine_tunes_peak_is_within_its_stated_ratio_of_the_estimate(checkpoint, tmp_path, monkeypatch, kind):
    """Two steps of a real fine-tune (micro-batches of 8 x 1,024 tokens on a GPU, fewer where the card cannot
    hold 8 with the allocator's margin; 4 x 64 on the CPU; every example filling them) from the saved
    checkpoint: its peak, weights included, within 0.9-1.15 of `finetune_need` (weights, Adam, the arm's
    copies, and what the peak phase holds beside them: autocast's copies on a GPU, activations, the output
    head's logits, gradients)."""
    from forgetmap.config.schema import ARM, FINETUNE, with_defaults
    from forgetmap.anatomy import lora_parameters, shape
    from forgetmap.memory import finetune_need, on_card
    from forgetmap.train import finetune
    from peaks import weights_in_heap

    method, checkpointing, arm = FINETUNES[kind]
    length = 1024 if CUDA else 64
    texts = sentences(2000, seed=3)
    long = [" ".join(texts[i:i + 200]) for i in range(0, 2000, 200)]  # every example longer than max_length
    task = tmp_path / "task.parquet"
    pd.DataFrame({"prompt": [t[:40] for t in long], "response": long, "split": "train"}).to_parquet(task)
    size = shape(checkpoint)
    lora = lora_parameters(checkpoint, 16, ["q_proj", "v_proj"]) if method == "lora" else 0

    def sized(batch):
        settings = with_defaults(FINETUNE, {"method": method, "steps": 2, "batch_size": batch, "max_length": length,
                                            "lr": 1e-5, "warmup_steps": 0, "device": DEVICE.type, "max_epochs": None,
                                            "gradient_checkpointing": checkpointing,
                                            "lora": {"r": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}})
        settings["chat_template"] = "tokenizer"
        if arm:
            settings["arm"] = {"name": "x", **with_defaults(ARM, arm)}
        return settings, finetune_need(size, settings, cuda=CUDA, lora=lora, arm=arm)

    # micro-batches of 8 where the card takes them with the allocator's margin (the KL anchor's 70 GiB does not
    # fit an 80 GB H100: 4 there), 4 on the CPU
    if CUDA:
        card = torch.cuda.get_device_properties(DEVICE).total_memory
        settings, need = next((s, n) for s, n in map(sized, (8, 4, 2, 1)) if on_card(n.device) <= card)
    else:
        settings, need = sized(4)
        weights_in_heap(monkeypatch)
    with device_peak() as found:
        finetune(str(checkpoint), str(task), settings, 1, str(tmp_path / "tuned"))
    ratio = found["peak"] / need.device
    report(f"fine-tune, {kind}", micro_batch=f"{settings['batch_size']} x {length}",
           peak_gib=round(found["peak"] / 2**30, 3), estimate_gib=round(need.device / 2**30, 3),
           ratio=round(ratio, 3), reserved_gib=round(found.get("reserved", 0) / 2**30, 3))
    assert 0.9 <= ratio <= 1.15, (kind, found, need.terms)


# --- numerics ----------------------------------------------------------------------------------------------------

def test_bf16_scores_are_within_a_stated_bound_of_fp32_and_any_batch_gives_the_same(checkpoint):
    """64 examples of up to 1,024 tokens (16 of 128 on the CPU): each example's mean NLL in bf16 within 5e-3 nats of
    fp32 (an H200 measured at most 1.4e-3 at 1B); scored again in other batch compositions (another token
    budget, the examples in reverse order), each NLL the same: to 1e-5 on the CPU; on a GPU within 2e-3, as a
    batch with padding takes the masked attention kernel and one without the causal one (the H200 found the
    compositions it tried identical)."""
    from forgetmap.nll import TorchScorer

    from forgetmap.data.chat import Encoded

    length, n = (1024, 64) if CUDA else (128, 16)
    rng = np.random.default_rng(2)
    cuts = rng.integers(length // 4, length + 1, n)  # lengths spread over a quarter to the whole
    examples = [Encoded(ids=e.ids[:cut], target_start=1, score_end=int(cut))
                for e, cut in zip(random_examples(length, n, 3), cuts)]
    full = TorchScorer(loaded(checkpoint, torch.float32), 0, 8 * length).score(examples)[0]
    model = loaded(checkpoint, torch.bfloat16)
    half = TorchScorer(model, 0, 8 * length).score(examples)[0]
    again = TorchScorer(model, 0, 3 * length).score(examples[::-1])[0][::-1]
    report("bf16 against fp32", max_abs_nll=float(np.abs(half - full).max()), mean_abs_nll=float(np.abs(half - full).mean()),
           max_batch_difference=float(np.abs(half - again).max()))
    assert np.abs(half - full).max() <= 5e-3
    assert np.abs(half - again).max() <= (2e-3 if CUDA else 1e-5)


def test_sampled_answers_repeat_by_seed_and_differ_across_seeds(checkpoint):
    """Temperature 0.7, top-p 0.95 (48 answers of 64 tokens on a GPU, 8 of 8 on the CPU): the same seed gives
    the same answers, another seed others."""
    from forgetmap.generation import Sampling, generate_torch
    from forgetmap.models import load_tokenizer

    tokenizer = load_tokenizer(checkpoint)
    model = loaded(checkpoint)
    rows, new = (48, 64) if CUDA else (8, 8)
    prompts = [e.ids[:64 - i] for i, e in enumerate(random_examples(64, rows, 4))]
    sampling = Sampling(0.7, 0.95)

    def answers(seed):
        return generate_torch(model, tokenizer, prompts, np.full(rows, new), sampling, seed, rows * (64 + new)).tokens

    first, again, other = answers(0), answers(0), answers(1)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert sum(not np.array_equal(a, b) for a, b in zip(first, other)) >= rows * 3 // 4


# --- forgetmap against the plain alternatives -----------------------------------------------------------------

def _timed(run):
    if CUDA:
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = run()
    if CUDA:
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def test_scoring_agrees_with_a_plain_hugging_face_loop(checkpoint):
    """The scorer against the loop a first script writes (full logits, fp32 log-softmax, a batch at a time),
    on the same examples and model: NLL the same within 5e-3 nats in bf16 on a GPU (the head's matrix products
    in other shapes round otherwise), 1e-4 in fp32 on the CPU; tokens/s of both."""
    from forgetmap.nll import TorchScorer

    length, n = (1024, 128) if CUDA else (128, 16)
    examples = random_examples(length, n, 5)
    model = loaded(checkpoint)
    scorer = TorchScorer(model, 0, BUDGET)
    scorer.score(examples[:2])  # warm-up, both paths
    ours, seconds = _timed(lambda: scorer.score(examples)[0])

    @torch.inference_mode()
    def plain():
        out = []
        for s in range(0, n, max(1, BUDGET // length)):
            ids = torch.from_numpy(np.stack([e.ids for e in examples[s:s + BUDGET // length]])).to(DEVICE)
            logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)
            out.append(-logp[:, :-1].gather(-1, ids[:, 1:, None])[..., 0].mean(-1).cpu())
        return torch.cat(out).numpy()

    theirs, plain_seconds = _timed(plain)
    report("scoring against a plain loop", forgetmap_tokens_per_s=round(n * length / seconds),
           plain_tokens_per_s=round(n * length / plain_seconds), ratio=round(plain_seconds / seconds, 2))
    assert np.abs(ours - theirs).max() <= (5e-3 if CUDA else 1e-4)


def test_packed_scoring_writes_the_padded_scores_and_both_are_timed(checkpoint):
    """Examples of varied lengths (64 to 1,024 tokens on a GPU) scored in padded batches (the GPU's default:
    up to 10 % padding) and packed in rows without attention across them (forgetmap.data.packing): the same NLL (in
    fp32 within 1e-5 on the CPU, 5e-3 in bf16 on a GPU); tokens/s of both and their ratio."""
    from forgetmap.data.chat import Encoded
    from forgetmap.nll import TorchScorer

    shortest, longest, n = (64, 1024, 256) if CUDA else (8, 128, 32)
    rng = np.random.default_rng(11)
    examples = [Encoded(rng.integers(5, OLMO2_VOCAB - 1, int(k)), 1, int(k)) for k in rng.integers(shortest, longest + 1, n)]
    tokens = sum(len(e.ids) for e in examples)
    model = loaded(checkpoint)
    padded, packed = TorchScorer(model, 0, BUDGET), TorchScorer(model, 0, BUDGET, packing=True)
    padded.score(examples[:2]), packed.score(examples[:2])  # warm-up, both paths
    theirs, padded_seconds = _timed(lambda: padded.score(examples)[0])
    ours, packed_seconds = _timed(lambda: packed.score(examples)[0])
    report("packed scoring against padded", examples=n, lengths=f"{shortest}-{longest}",
           padded_tokens_per_s=round(tokens / padded_seconds), packed_tokens_per_s=round(tokens / packed_seconds),
           ratio=round(padded_seconds / packed_seconds, 2), max_nll_difference=float(np.abs(ours - theirs).max()))
    assert np.abs(ours - theirs).max() <= (5e-3 if CUDA else 1e-5)


def test_generation_writes_what_generate_writes_and_both_are_timed(checkpoint):
    """Greedy answers of 64 prompts (960 tokens on a GPU, 48 on the CPU) at the same batch, timed in scoring's
    precision (bf16 on a GPU); in fp32, forgetmap's tokens equal `generate`'s on at least 95 % of the answers on a
    GPU (random weights leave near-ties that kernels may break apart; in bf16 most answers part: 21 of 64 on an
    H200) and on all of them on the CPU."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from forgetmap.models import load_tokenizer
    from generation_steps import runners

    prompt, new = (960, 64) if CUDA else (48, 16)
    tokenizer = load_tokenizer(checkpoint)
    prompts = [e.ids for e in random_examples(prompt, 64, 6)]

    def answers(model, timed):
        ours, theirs = runners(model, tokenizer, prompts, 0.0, 1.0, 64 * (prompt + new))
        if timed:  # warm-up; the static cache's compiled step at the shapes it is timed at (it compiles per shape)
            ours(2), theirs(2), ours(new, static=True)
        mine, seconds = _timed(lambda: ours(new))
        fixed, static_seconds = _timed(lambda: ours(new, static=True))
        generated, generate_seconds = _timed(lambda: theirs(new))
        same = [np.array_equal(m, g[prompt:prompt + len(m)].cpu().numpy()) for m, g in zip(mine.tokens, generated)]
        static_same = [np.array_equal(m, g[prompt:prompt + len(m)].cpu().numpy())
                       for m, g in zip(fixed.tokens, generated)]
        return int(sum(same)), int(sum(static_same)), seconds, static_seconds, generate_seconds

    same, static_same, seconds, static_seconds, generate_seconds = answers(loaded(checkpoint), True)
    exact, static_exact = answers(loaded(checkpoint, torch.float32), False)[:2] if CUDA else (same, static_same)
    report("generation against generate", rows=64, new_tokens=new, forgetmap_tokens_per_s=round(64 * new / seconds),
           static_cache_tokens_per_s=round(64 * new / static_seconds),
           generate_tokens_per_s=round(64 * new / generate_seconds), ratio=round(generate_seconds / seconds, 2),
           static_ratio=round(generate_seconds / static_seconds, 2), same_answers=same,
           same_answers_fp32=exact, static_same_answers_fp32=static_exact)
    assert exact >= (0.95 * 64 if CUDA else 64) and static_exact >= (0.95 * 64 if CUDA else 64)


def test_fine_tuning_matches_transformers_trainer_step_for_step(checkpoint, tmp_path):
    """The same examples, micro-batches, learning rate and AdamW: forgetmap's loop and `Trainer` write the same
    losses for 4 steps (fp32 on the CPU: within 1e-4; bf16 autocast on a GPU: within 2 %); tokens/s of both."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from forgetmap.data.chat import Encoded
    from forgetmap.train import train

    length, batch, steps = (1024, 8, 4) if CUDA else (64, 4, 4)
    rng = np.random.default_rng(7)
    ids = rng.integers(5, OLMO2_VOCAB - 1, (steps * batch, length))
    examples = [Encoded(ids=row, target_start=1, score_end=length) for row in ids]  # HF's shifted labels
    settings = {"lr": 1e-5, "warmup_steps": 0, "weight_decay": 0.0, "max_grad_norm": 1.0, "bf16": CUDA,
                "grad_accum": 1, "seed": 0, "device": DEVICE.type, "gradient_checkpointing": False}

    def ours():
        from forgetmap.models import load_model

        model = load_model(checkpoint, DEVICE, torch.float32, "sdpa")
        batches = iter([[examples[s * batch:(s + 1) * batch]] for s in range(steps)])
        log = tmp_path / "ours.jsonl"
        train(model, batches, steps, settings, 0, log)
        return [json.loads(line)["loss"] for line in log.read_text().splitlines()]

    def trainer():
        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32, attn_implementation="sdpa")
        data = Dataset.from_dict({"input_ids": ids.tolist(), "labels": ids.tolist()})
        args = TrainingArguments(output_dir=str(tmp_path / "trainer"), per_device_train_batch_size=batch,
                                 max_steps=steps, learning_rate=1e-5, lr_scheduler_type="linear",
                                 weight_decay=0.0, max_grad_norm=1.0, bf16=CUDA, logging_steps=1, report_to=[],
                                 save_strategy="no", use_cpu=not CUDA, optim="adamw_torch_fused" if CUDA else
                                 "adamw_torch", dataloader_num_workers=0, seed=0, data_seed=0)
        class InOrder(Trainer):  # the examples in the order forgetmap's steps take them
            def _get_train_sampler(self, *args, **kwargs):
                return torch.utils.data.SequentialSampler(self.train_dataset)

        run = InOrder(model=model, args=args, train_dataset=data)
        run.train()
        return [entry["loss"] for entry in run.state.log_history if "loss" in entry]

    mine, seconds = _timed(ours)
    theirs, trainer_seconds = _timed(trainer)
    report("fine-tuning against Trainer", tokens=steps * batch * length, forgetmap_seconds=round(seconds, 2),
           trainer_seconds=round(trainer_seconds, 2), losses=[mine, theirs])
    assert len(mine) == len(theirs) == steps
    assert np.allclose(mine, theirs, rtol=2e-2 if CUDA else 1e-4)


# --- the forgetting monitor inside the Trainer's FSDP ----------------------------------------------------------

@pytest.mark.skipif(not CUDA, reason="accelerate's FSDP needs a GPU: on the CPU the Trainer falls back to DDP without "
                                     "a word (tests/unit/test_monitor.py shards with fully_shard and FSDP1 over gloo)")
@pytest.mark.parametrize("parallel", ["fsdp2", "fsdp1"])
def test_the_monitor_inside_the_trainers_fsdp_measures_as_one_process(parallel, tmp_path):
    """transformers' Trainer with accelerate's FSDP (2: fully_shard, 1: the wrapper) on one GPU, the forgetting
    monitor attached: the model really is sharded, the monitor scores through the shards, its baseline equals one
    unsharded process's to 1e-4 nats, and it checks at each evaluation."""
    import subprocess
    import sys
    from pathlib import Path

    from monitor_run import monitored_base

    from forgetmap.meter import ProbeMeter
    from forgetmap.models import load_model, load_tokenizer
    from forgetmap.monitor import ForecastMap

    base, _, _, map_path = monitored_base(tmp_path / "map", "cuda")
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent / "workflow"), str(tests),
                                                        os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
                           str(tests / "monitor_run.py"), str(base), str(map_path), str(tmp_path / "run"),
                           "--parallel", parallel, "--steps", "4", "--device", "cuda"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    held = json.loads((tmp_path / "run" / "monitor.json").read_text())
    forecast_map = ForecastMap.read(map_path)
    alone = ProbeMeter.for_rows(load_model(base, DEVICE, torch.float32), load_tokenizer(base), forecast_map.measured_rows(), "auto",
                                64).measure()
    report(f"the monitor under the Trainer's {parallel}", wrapped=held["wrapped"], kind=held["kind"],
           seconds=round(time.perf_counter() - started, 1),
           check_seconds=[round(c["eval_forget_seconds"], 3) for c in held["checks"]],
           baseline_difference=float(np.abs(np.asarray(held["baseline"]) - alone).max()))
    assert held["wrapped"] == parallel and held["kind"] == parallel
    np.testing.assert_allclose(held["baseline"], alone, atol=1e-4)
    assert [c["step"] for c in held["checks"]] == [2, 4]
