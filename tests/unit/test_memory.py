"""A model's memory read from its config: parameters as the loaded model has them, the key-value cache's
shape, and the vLLM engine refused where its weights and one sequence cannot fit the GPUs a job claims."""

import json
import re

import pytest

from forgetmap.errors import ConfigError

from standins import ARCHITECTURES, save_standin

GIB = 2**30
# OLMo-2-1124-7B's and -13B's config.json, the fields that size them
OLMO2 = {"7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                    num_key_value_heads=32),
         "13b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40,
                     num_key_value_heads=40)}


def olmo2_config(tmp_path, size: str):
    directory = tmp_path / f"olmo2-{size}"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "rms_norm_eps": 1e-6, **OLMO2[size]}))
    return directory


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_the_shape_counts_the_parameters_a_loaded_model_has(tmp_path, architecture):
    from transformers import AutoModelForCausalLM

    from forgetmap.anatomy import shape

    directory = save_standin(tmp_path / architecture, architecture, width=64)
    model = AutoModelForCausalLM.from_pretrained(directory)
    found = shape(directory)
    assert found.parameters == sum(p.numel() for p in model.parameters())
    assert (found.layers, found.kv_heads, found.head_dim) == (2, 2, 32)
    assert found.kv_bytes_per_token(4) == 2 * 2 * 2 * 32 * 4


def test_the_paper_olmo2_models_are_sized_from_their_configs(tmp_path):
    """7.30B and 13.7B parameters (OLMo 2's report: 7B and 13B, untied embeddings); 0.5 MiB and 0.78 MiB of
    bf16 key-value cache per token (32 layers x 32 heads x 128, 40 x 40 x 128)."""
    from forgetmap.anatomy import shape

    seven, thirteen = shape(olmo2_config(tmp_path, "7b")), shape(olmo2_config(tmp_path, "13b"))
    assert seven.parameters == pytest.approx(7.30e9, rel=2e-3)
    assert thirteen.parameters == pytest.approx(13.72e9, rel=2e-3)
    assert seven.kv_bytes_per_token(2) == 2 * 32 * 32 * 128 * 2 and thirteen.head_dim == 128


def test_an_engine_that_cannot_fit_the_claimed_gpus_is_refused_naming_the_keys_and_the_gpus_that_fit(tmp_path):
    from forgetmap.errors import ForgetmapError
    from forgetmap.engine import check_engine_fits, engine_need
    from forgetmap.anatomy import shape

    seven, thirteen = shape(olmo2_config(tmp_path, "7b")), shape(olmo2_config(tmp_path, "13b"))
    weights, cache = engine_need(seven, "bfloat16", 4096, 1)
    assert weights / GIB == pytest.approx(13.6, abs=0.05) and cache / GIB == pytest.approx(2.0)
    check_engine_fits(seven, "bfloat16", 4096, 1, 0.85, 24 * GIB, "olmo2-7b")  # 15.6 of 20.4 GiB
    check_engine_fits(thirteen, "bfloat16", 4096, 2, 0.85, 24 * GIB, "olmo2-13b")  # split over two
    with pytest.raises(ForgetmapError, match=r"olmo2-13b: the model does not fit the GPUs the job claims: its 13.72B "
                                             r"parameters in bfloat16 \(25.5 GiB per GPU\) and one 4096-token sequence's "
                                             r"key-value cache \(3.12 GiB per GPU\) need 28.7 GiB on each of 1 GPU.*"
                                             r"0.85 x 24.0 GiB = 20.4 GiB .*score.gpu_memory_utilization.*claim 2 GPUs or "
                                             r"more .*resources.score.gpu"):
        check_engine_fits(thirteen, "bfloat16", 4096, 1, 0.85, 24 * GIB, "olmo2-13b")
    with pytest.raises(ForgetmapError, match=r"claim 3 GPUs or more"):  # fp32 doubles the weights
        check_engine_fits(seven, "float32", 4096, 1, 0.85, 16 * GIB, "olmo2-7b")


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_activation_bytes_scale_from_a_tiny_width_to_an_unseen_one_exactly(tmp_path, architecture):
    """What autograd keeps per token and layer is linear in the hidden, key-value and MLP widths: the
    coefficients measured at tiny widths give, at a width never measured (grouped heads too), the bytes a
    forward of that width keeps, in fp32 and under bf16 autocast; frozen weights (LoRA's base) keep less."""
    from transformers import AutoConfig

    from forgetmap.memory import _saved_bytes, activation_coefficients

    directory = str(save_standin(tmp_path / architecture, architecture, width=64))
    config = AutoConfig.from_pretrained(directory)
    hidden, intermediate, ratio = 384, 1536, 2
    kv = hidden // ratio if architecture != "gpt_neox" else hidden
    for autocast, frozen in ((False, False), (True, False), (False, True)):
        a, d, b, e = activation_coefficients(directory, autocast, frozen)
        kept = [[_saved_bytes(config, hidden, intermediate, ratio, layers, tokens, autocast, frozen)
                 for layers in (1, 2)] for tokens in (32, 64)]
        measured = ((kept[1][1] - kept[1][0]) - (kept[0][1] - kept[0][0])) / 32
        assert a * hidden + d * kv + b * intermediate + e == pytest.approx(measured, rel=1e-6)
    assert sum(activation_coefficients(directory, False, True)) < sum(activation_coefficients(directory, False))


RUNS = {  # architecture, method, arm, width, micro-batch x tokens: activations or weights leading
    "llama full": ("llama", "full", None, 256, 8, 128),
    "gpt_neox full, weights leading": ("gpt_neox", "full", None, 768, 1, 16),
    "llama lora": ("llama", "lora", None, 256, 8, 128),
    "olmo2 kl_base": ("olmo2", "full", {"kl_base": 0.1}, 256, 8, 128),
    "llama lora kl_base": ("llama", "lora", {"kl_base": 0.1}, 256, 8, 128),
    "olmo l2_sp": ("olmo", "full", {"l2_sp": 0.1}, 768, 1, 16),
    "llama ema": ("llama", "full", {"ema": 0.9}, 768, 1, 16),
}


def _finetune(tmp_path, run: str):
    """Run `run`'s real fine-tune (two steps, examples filling max_length) on the CPU: (its peak, its estimate)."""
    import pandas as pd

    from forgetmap.config.schema import ARM, FINETUNE, with_defaults
    from forgetmap.anatomy import lora_parameters, shape
    from forgetmap.memory import finetune_need
    from forgetmap.train import finetune
    from peaks import peak_bytes
    from standins import TULU_TEMPLATE, sentences

    architecture, method, arm, width, batch, tokens = RUNS[run]
    model = save_standin(tmp_path / "model", architecture, TULU_TEMPLATE, width=width, max_positions=256,
                         vocab_size=2000)
    texts = sentences(384, seed=3)
    long = [" ".join(texts[i:i + 12]) for i in range(0, 384, 12)]  # every example longer than max_length
    task = tmp_path / "task.parquet"
    pd.DataFrame({"prompt": [t[:40] for t in long], "response": long, "split": "train"}).to_parquet(task)
    targets = ["query_key_value"] if architecture == "gpt_neox" else ["q_proj", "v_proj"]
    settings = with_defaults(FINETUNE, {"method": method, "steps": 2, "batch_size": batch, "max_length": tokens,
                                        "lr": 1e-4, "warmup_steps": 0, "device": "cpu", "max_epochs": None,
                                        "lora": {"r": 16, "dropout": 0.0, "target_modules": targets}})
    settings["chat_template"] = "tokenizer"
    if arm:
        settings["arm"] = {"name": "x", **with_defaults(ARM, arm)}
    with peak_bytes() as found:
        finetune(str(model), str(task), settings, 1, str(tmp_path / "tuned"))
    lora = lora_parameters(model, 16, targets) if method == "lora" else 0
    return found["peak"], finetune_need(shape(model), settings, cuda=False, lora=lora, arm=arm)


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    """A LoRA fine-tune with the KL anchor, unmeasured, before any is measured: what a process does once (peft's
    and the trainer's imports, the chat template's compilation, the optimizer's first step) is no part of a
    fine-tune's peak, whichever run a process measures first (measured alone first, LoRA's peak read 1.42x)."""
    from peaks import weights_in_heap

    with pytest.MonkeyPatch.context() as monkeypatch:
        weights_in_heap(monkeypatch)
        _finetune(tmp_path_factory.mktemp("warm"), "llama lora kl_base")


@pytest.mark.skipif(__import__("peaks").LIBC is None, reason="needs glibc's mallinfo2 (2.33 or later)")
@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_fine_tunes_estimate_is_within_its_stated_ratio_of_the_measured_peak(tmp_path, monkeypatch, warmed, run):
    """A real fine-tune (two steps, examples filling max_length) on the CPU: the peak of the bytes its process
    holds, against `finetune_need` (weights, Adam, each arm's copies, and what its peak phase holds beside
    them): measured between 0.9 and 1.15 times the estimate (measured 1.02-1.08; docs/gpu.md states it)."""
    from peaks import weights_in_heap

    weights_in_heap(monkeypatch)
    peak, need = _finetune(tmp_path, run)
    print(f"{run}: measured {peak / 2**20:.1f} MiB, estimated {need.device / 2**20:.1f} MiB")
    assert 0.9 <= peak / need.device <= 1.15, (peak / 2**20, need.terms)


def planned(tmp_path, size: str, finetune: dict, resources: dict, arms: dict | None = None,
            gpu_models: dict | None = None, stages: dict | None = None):
    """A plan over the demo corpus whose base is OLMo-2 at `size` (its config.json and a stand-in's tokenizer:
    no weights, as planning reads none); `stages`: other stages' resources (by default none claims a GPU),
    `gpu_models`: the GPU models a profile names (Plan's argument)."""
    from forgetmap.plan import Plan
    from standins import TULU_TEMPLATE, train_tokenizer

    directory = tmp_path / f"olmo2-{size}"
    if not directory.exists():
        olmo2_config(tmp_path, size)
        train_tokenizer("olmo2", TULU_TEMPLATE).save_pretrained(directory)
    raw = {"upstream": {"demo": {"format": "demo", "n_examples": 200}}, "categories": {"w": {"group": "in_domain"}},
           "tasks": {"city_qa": {"category": "w"}, "job_qa": {"category": "w"}},
           "models": {"m": {"upstream": "demo", "base": {"kind": "pretrained", "path": str(directory)},
                            "finetune": finetune, "resources": {
                                "finetune": resources, **{stage: {"gpu": 0} for stage in ("score", "semantic", "gradient")},
                                **(stages or {})}}}}
    if arms:
        raw["prediction"] = {"splits": {"s": {"test": ["city_qa"]}}}
        raw["mitigation"] = {"tasks": {"split": "s"}, "heldout": 50, "arms": arms}
    return Plan(raw, gpu_models)


def test_a_13b_fine_tune_that_cannot_fit_its_gpus_is_refused_at_planning_naming_the_keys(tmp_path, capsys):
    """OLMo-2 13B on one 80 GB GPU cannot fit even with gradient checkpointing (weights, gradients and Adam
    alone are 204 GiB): refused before any job, naming the GPU memory key, the figures and what would fit it;
    sharded over 8 GPUs with checkpointing decided on, it plans, and the table is in the log."""
    from forgetmap.config import preflight

    with pytest.raises(ConfigError, match=r"config key models.m.resources.finetune.gpu_memory_gib: finetune \(2 tasks: "
                                          r"city_qa, ...\) of model 'm' needs 2\d\d.\d GiB on each of its 1 GPU\(s\) "
                                          r"\(weights 51.1, adam 102.2, autocast copies 1.0, "
                                          r"activations 9.0, gradients 51.1; gradient checkpointing on; .* each GPU has 79.6 GiB: shard "
                                          r"it over more GPUs \(models.m.finetune.processes with "
                                          r"models.m.resources.finetune.gpu alike\)"):
        preflight.check(planned(tmp_path, "13b", {}, {"gpu": 1, "gpu_memory_gib": 79.6}))
    plan = planned(tmp_path, "13b", {"processes": 8}, {"gpu": 8, "gpu_memory_gib": 79.6, "mem_mb": 200000})
    preflight.check(plan)
    assert plan.finetune_settings("m", "city_qa")["gradient_checkpointing"] is True
    table = capsys.readouterr().err
    assert "memory of each job on GPUs" in table
    assert re.search(r"m +finetune \(2 tasks: city_qa, ...\) +8 +on +\d\d\.\d +79.6 +\d+\.\d +200000", table), table


def test_checkpointing_is_decided_where_the_gpu_is_known_and_left_to_the_job_where_it_is_not(tmp_path):
    """auto: off on a CPU; on where the 7B fine-tune over 4 GPUs would not fit 80 GB without it (124 GiB of
    activations and weights), off where the batch is small enough; `auto` in the job's settings where the
    GPU's memory is not configured (the job decides on the GPU it gets)."""
    cpu = planned(tmp_path, "7b", {}, {"gpu": 0})
    assert cpu.finetune_settings("m", "city_qa")["gradient_checkpointing"] is False
    four = {"gpu": 4, "gpu_memory_gib": 79.6, "mem_mb": 100000}
    assert planned(tmp_path, "7b", {"processes": 4}, four).finetune_settings("m", "city_qa")["gradient_checkpointing"]
    small = planned(tmp_path, "7b", {"processes": 4, "batch_size": 1, "max_length": 512}, four)
    assert small.finetune_settings("m", "city_qa")["gradient_checkpointing"] is False
    unknown = planned(tmp_path, "7b", {"processes": 4}, {"gpu": 4, "mem_mb": 100000})
    assert unknown.finetune_settings("m", "city_qa")["gradient_checkpointing"] == "auto"
    chosen = planned(tmp_path, "7b", {"processes": 4, "gradient_checkpointing": False}, four)
    assert chosen.finetune_settings("m", "city_qa")["gradient_checkpointing"] is False  # the user's word stands


def test_an_fsdp_job_whose_host_memory_request_is_below_what_it_holds_is_refused(tmp_path):
    """Four processes fine-tuning 7B hold their own host memory (3 GiB each) and, while rank 0 writes the
    checkpoint, one 5 GiB file of it (the whole model never: forgetmap.sharded); 16,000 MB would be killed
    by the scheduler: refused before any job, naming mem_mb and the figure to set; the schema's 32,000 holds."""
    from forgetmap.config import preflight

    plan = planned(tmp_path, "7b", {"processes": 4}, {"gpu": 4, "gpu_memory_gib": 79.6, "mem_mb": 16000})
    with pytest.raises(ConfigError, match=r"config key models.m.resources.finetune.mem_mb: value 16000, and finetune "
                                          r"\(2 tasks: city_qa, ...\) of model 'm' holds 17.0 GiB on the host \(4 "
                                          r"processes' own, 12 GiB, and one checkpoint file while rank 0 writes it, 5.0 "
                                          r"GiB\): set it to 20000 or more"):
        preflight.check(plan)
    preflight.check(planned(tmp_path, "7b", {"processes": 4}, {"gpu": 4, "gpu_memory_gib": 79.6}))


def test_a_job_left_to_decide_checkpointing_decides_on_the_gpu_it_got_and_says_so(tmp_path, monkeypatch, caplog):
    """`auto` in a job's settings (the plan did not know the GPU): off on a CPU; on a GPU, by the estimate
    against the device's memory (a GPU of 1 MiB stood in for by its reported properties), in the log."""
    import logging
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM

    from forgetmap.config.schema import FINETUNE, with_defaults
    from forgetmap.train import checkpointing

    model = AutoModelForCausalLM.from_pretrained(save_standin(tmp_path / "llama", "llama", width=64))
    settings = with_defaults(FINETUNE, {"batch_size": 8, "max_length": 128})
    assert settings["gradient_checkpointing"] == "auto"
    assert checkpointing(model, settings, torch.device("cpu")) is False
    for total, expected in ((2**20, True), (80 * 2**30, False)):
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda device, t=total: SimpleNamespace(total_memory=t))
        with caplog.at_level(logging.INFO, logger="forgetmap.train"):
            assert checkpointing(model, settings, torch.device("cuda", 0)) is expected
        assert f"gradient checkpointing {'on' if expected else 'off'}: the fine-tune needs" in caplog.text
        caplog.clear()
    assert checkpointing(model, {**settings, "gradient_checkpointing": True}, torch.device("cpu")) is True


def test_a_fine_tunes_memory_request_is_the_estimate_where_the_config_leaves_it_unset(tmp_path):
    """resources.finetune.mem_mb null (the default): the job asks for its estimated host memory, 10 % added:
    four FSDP processes of 7B hold 17 GiB (20,000 MB asked); a CPU fine-tune holds the whole of it there; a
    configured value stands."""
    from forgetmap.config import preflight

    fsdp = planned(tmp_path, "7b", {"processes": 4}, {"gpu": 4, "gpu_memory_gib": 79.6})
    assert fsdp.cfg["models"]["m"]["resources"]["finetune"]["mem_mb"] is None
    assert fsdp.resource("m", "finetune", "mem_mb") == 20000
    preflight.check(fsdp)  # the estimate holds what the check asks
    cpu = planned(tmp_path, "7b", {}, {"gpu": 0})
    assert cpu.resource("m", "finetune", "mem_mb") > 200000  # 7B's weights, gradients, Adam and activations
    assert planned(tmp_path, "7b", {}, {"gpu": 0, "mem_mb": 5000}).resource("m", "finetune", "mem_mb") == 5000


@pytest.mark.skipif(__import__("peaks").LIBC is None, reason="needs glibc's mallinfo2 (2.33 or later)")
def test_an_fsdp_fine_tunes_estimate_is_within_its_stated_ratio_of_each_ranks_peak(tmp_path):
    """Two gloo processes (torchrun) train a Llama stand-in two steps, weights leading: each rank holds half
    the weights, gradients and Adam states, the gathered blocks and root, and a whole micro-batch's
    activations. Whether a block's unsharded gradients are still held when the peak comes depends on when
    gloo's reduce-scatter runs beside the next block's backward (its own threads): measured 151.8 MiB on one
    Intel Xeon (without them), 177.0 on another, 197.6 with the other core busy. So each rank's peak is
    within 0.9 of the estimate without that term and 1.2 of the whole `finetune_need` with processes 2."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    from forgetmap.config.schema import FINETUNE, with_defaults
    from forgetmap.anatomy import shape
    from forgetmap.memory import finetune_need
    from standins import TULU_TEMPLATE, sentences

    model = save_standin(tmp_path / "model", "llama", TULU_TEMPLATE, width=768, max_positions=256, vocab_size=2000)
    texts = sentences(384, seed=3)
    long = [" ".join(texts[i:i + 12]) for i in range(0, 384, 12)]
    task = tmp_path / "task.parquet"
    pd.DataFrame({"prompt": [t[:40] for t in long], "response": long, "split": "train"}).to_parquet(task)
    settings = with_defaults(FINETUNE, {"steps": 2, "batch_size": 1, "max_length": 16, "lr": 1e-4, "warmup_steps": 0,
                                        "device": "cpu", "max_epochs": None, "processes": 2})
    settings["chat_template"] = "tokenizer"
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(tests.parent / "workflow"), str(tests), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(tests / "fsdp_probe.py"), "train", str(model), str(task), json.dumps(settings),
                           str(tmp_path / "peaks")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    need = finetune_need(shape(model), settings, cuda=False)
    for rank in (0, 1):
        peak = json.loads((tmp_path / f"peaks.{rank}").read_text())["train"]
        floor = need.device - need.terms["fsdp_block_gradients"]  # every term that must be held at once
        print(f"rank {rank}: measured {peak / 2**20:.1f} MiB, estimated {need.device / 2**20:.1f} MiB "
              f"({floor / 2**20:.1f} without a block's unsharded gradients)")
        assert 0.9 * floor <= peak <= 1.2 * need.device, (rank, peak / 2**20, need.terms)


def test_a_vllm_scored_model_whose_engine_cannot_fit_its_score_gpus_is_refused_at_planning(tmp_path):
    """13B in bf16 on one 24 GiB GPU (0.85 of it for vLLM): its weights alone are 25.5 GiB; refused before any
    job, naming the score job's GPU memory key and the GPUs that would fit; two GPUs plan."""
    from forgetmap.config import preflight

    plan = planned(tmp_path, "13b", {}, {"gpu": 0})
    plan.cfg["models"]["m"]["score"]["backend"] = "vllm"
    plan.cfg["models"]["m"]["resources"]["score"].update(gpu=1, gpu_memory_gib=24)
    with pytest.raises(ConfigError, match=r"config key models.m.resources.score.gpu_memory_gib \(24 GiB\): the model "
                                          r"does not fit the GPUs the job claims: its 13.72B parameters in bfloat16 "
                                          r".*claim 2 GPUs or more"):
        preflight.check(plan)
    plan.cfg["models"]["m"]["resources"]["score"]["gpu"] = 2
    preflight.check(plan)


def test_a_tied_output_head_is_counted_once():
    """The demo's Llama ties its output head to the input embedding (as OLMo-1B does): the meta-device count
    equals the loaded model's parameters, the head not counted twice."""
    from transformers import AutoModelForCausalLM

    from forgetmap.anatomy import shape
    from forgetmap.models import demo_config

    config = demo_config(300, {"hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 2,
                               "max_position_embeddings": 128})
    assert config.tie_word_embeddings
    assert shape(config).parameters == sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())


OLMO2_VOCAB = 100352  # OLMo-2's vocabulary: every term that scales with it shows at a small width


@pytest.mark.skipif(__import__("peaks").LIBC is None, reason="needs glibc's mallinfo2 (2.33 or later)")
@pytest.mark.parametrize("architecture", sorted(set(ARCHITECTURES) - {"olmo2"}))  # OLMo-2: tests/gpu/
def test_score_generation_and_gradient_jobs_estimates_are_within_their_stated_ratio_of_the_measured_peak(
        tmp_path, monkeypatch, architecture):
    """At OLMo-2's vocabulary (100,352) and a small width, on the CPU with the weights in the heap: the score
    job's scoring from a new scorer (its first batch's head check included, on a short prefix: on a whole row of
    1,024 tokens it held 784 MiB, 1.5x the scoring batch) on rows of 1,024 tokens (and 256 for Llama);
    generation of 32 tokens after prompts of 196-256 (its prefill leads) and of 224 after 17-32 (its last
    decode step leads, the cache at its largest); the
    gradient job's examples. Each peak is within 0.9-1.15 of the estimate traced on the meta device (measured
    0.96-1.0; docs/gpu.md). The gradient's attention is traced as the CPU runs it, the math path."""
    import gc

    import numpy as np
    import torch

    from forgetmap.data.chat import Encoded
    from forgetmap.generation import generate_torch
    from forgetmap.gradients import projected_gradients
    from forgetmap.anatomy import shape
    from forgetmap.memory import generation_need, gradient_need, score_need
    from forgetmap.models import load_model, load_tokenizer
    from forgetmap.nll import TorchScorer
    from peaks import peak_bytes

    directory = save_standin(tmp_path / architecture, architecture, width=128, vocab_size=2000, max_positions=1024,
                             model_vocab=OLMO2_VOCAB)
    size, budget, new = shape(directory), 2048, 32
    assert size.vocab == OLMO2_VOCAB
    rng = np.random.default_rng(0)

    def examples(length, n):
        return [Encoded(ids=rng.integers(5, size.vocab - 1, length), target_start=1, score_end=length)
                for _ in range(n)]

    tokenizer = load_tokenizer(directory)

    def loaded(attention):
        model = load_model(directory, torch.device("cpu"), torch.float32, attention)
        with torch.no_grad():  # into the heap, as a GPU holds them
            for parameter in model.parameters():
                parameter.data = parameter.data.clone()
        return model

    def beyond_weights(need):  # the model is loaded before each measurement begins
        return {k: v for k, v in need.terms.items() if k != "weights"}

    prompts = [e.ids[:256 - 4 * i] for i, e in enumerate(examples(256, 16))]  # left-padded: the mask is built
    runs = {
        **{f"scoring rows of {length}": (
            lambda model, length=length: TorchScorer(model, 0, budget).score(examples(length, 2 * budget // length)),
            beyond_weights(score_need(size, "float32", budget, length)))
            for length in ((256, 1024) if architecture == "llama" else (1024,))},
        # 16 rows of 256 + 32 tokens: the batch the token budget makes on the CPU
        "generation": (lambda model: generate_torch(model, tokenizer, prompts, np.full(16, new),
                                                    token_budget=16 * (256 + new)),
                       beyond_weights(generation_need(size, "float32", 16, 256, new, 16 * (256 + new)))),
        # answers longer than their prompts: the peak comes at the last decode step, the cache at its largest
        "generation, long answers": (
            lambda model: generate_torch(model, tokenizer, [p[:32 - i] for i, p in enumerate(prompts)],
                                         np.full(16, 224), token_budget=16 * 256),
            beyond_weights(generation_need(size, "float32", 16, 32, 224, 16 * 256))),
        # the CPU's fp32 backward takes attention's math path (a GPU's fused kernel keeps no scores)
        "gradient": (lambda model: projected_gradients(model, examples(256, 2), 64),
                     beyond_weights(gradient_need(size, 256, 64, fused_attention=False))),
    }
    for name, (run, need) in runs.items():
        model = loaded("sdpa")
        gc.collect()
        with peak_bytes() as found:
            run(model)
        estimate = sum(need.values())
        print(f"{architecture} {name}: measured {found['peak'] / 2**20:.1f} MiB beyond the weights, estimated "
              f"{estimate / 2**20:.1f} MiB ({', '.join(need)}): {found['peak'] / estimate:.3f}")
        assert 0.9 <= found["peak"] / estimate <= 1.15, (name, found["peak"] / 2**20, need)
        assert "head_check" not in need  # the first batch's check costs less than a scoring batch
        del model


@pytest.mark.skipif(__import__("peaks").LIBC is None, reason="needs glibc's mallinfo2 (2.33 or later)")
def test_the_semantic_jobs_batch_is_within_its_stated_ratio_of_its_estimate():
    """MiniLM's forward over one batch of 64 texts of 256 tokens, measured, against the traced estimate's
    forward (measured 0.99)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from forgetmap.embed import minilm_path
    from forgetmap.memory import embedding_need
    from peaks import peak_bytes
    from standins import sentences

    model = AutoModel.from_pretrained(minilm_path(), local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    batch = tokenizer([" ".join(sentences(40, seed=i)) for i in range(64)], padding=True, truncation=True,
                      max_length=256, return_tensors="pt")
    assert batch["input_ids"].shape == (64, 256)
    with torch.inference_mode(), peak_bytes() as found:
        model(**batch)
    need = embedding_need(minilm_path(), 64, 256)
    assert 0.9 <= found["peak"] / need.terms["forward"] <= 1.2, (found["peak"] / 2**20, need.terms)


def test_scoring_keeps_no_key_value_cache(tmp_path, monkeypatch):
    """Without gradients a key-value cache would keep every layer's keys and values of the whole batch to the
    end of the forward (8 GiB of a 7B model's 16,384-token batch): the scorer's forward fills none."""
    import numpy as np
    import torch
    from transformers import cache_utils

    from forgetmap.data.chat import Encoded
    from forgetmap.models import load_model
    from forgetmap.nll import TorchScorer

    filled = []
    update = cache_utils.DynamicLayer.update
    monkeypatch.setattr(cache_utils.DynamicLayer, "update", lambda self, *a, **k: filled.append(1) or update(self, *a, **k))
    model = load_model(save_standin(tmp_path / "llama", "llama", width=64), torch.device("cpu"), torch.float32)
    examples = [Encoded(ids=np.arange(5, 5 + n), target_start=1, score_end=n) for n in (20, 30)]
    TorchScorer(model, 0, 64, max_padding=1.0).score_greedy(examples)
    assert not filled
    model(input_ids=torch.arange(5, 25)[None])  # the model's own default fills one per layer
    assert len(filled) == 2


def test_score_and_gradient_jobs_that_cannot_fit_their_gpus_are_refused_at_planning(tmp_path, capsys):
    """13B scored with torch on a 24 GiB GPU (its bf16 weights alone are 25.5 GiB; generation's batches would
    hold what the weights leave, nothing, so scoring leads): refused, naming the score job's memory key and
    what lowers it; its gradient job on an 80 GB GPU (51 GiB of fp32 weights and one
    example's 16 GiB) plans, and on a 48 GB one is refused. The table lists every GPU job."""
    from forgetmap.config import preflight

    score = {"score": {"gpu": 1, "gpu_memory_gib": 24}}
    with pytest.raises(ConfigError, match=r"config key models.m.resources.score.gpu_memory_gib: score \(torch, with "
                                          r"generation\) of model 'm' needs \d\d.\d GiB on each of its 1 GPU\(s\) "
                                          r"\(weights 25.5, scoring \d+.\d; .* each GPU has 24.0 GiB: lower "
                                          r"models.m.score.token_budget"):
        preflight.check(planned(tmp_path, "13b", {}, {"gpu": 0}, stages=score))
    gradient = {"gradient": {"gpu": 1, "gpu_memory_gib": 79.6}}
    preflight.check(planned(tmp_path, "13b", {}, {"gpu": 0}, stages=gradient))
    table = capsys.readouterr().err
    assert re.search(r"m +gradient similarity \(one example\) +1 +- +6\d\.\d +79.6", table), table
    with pytest.raises(ConfigError, match=r"config key models.m.resources.gradient.gpu_memory_gib: gradient "
                                          r"similarity \(one example\) of model 'm' needs 6\d.\d GiB .*weights 51.1, "
                                          r"one example 1\d.\d.*each GPU has 47.5 GiB: give the job a larger GPU"):
        preflight.check(planned(tmp_path, "13b", {}, {"gpu": 0}, stages={"gradient": {"gpu": 1, "gpu_memory_gib": 47.5}}))


def test_the_gpu_model_a_profile_names_sizes_jobs_where_the_config_does_not(tmp_path, capsys):
    """A profile's `gpu_model` stands for the memory key: h100 decides checkpointing as 79.6 GiB would; a100,
    sold with 40 and 80 GB, leaves it to the job and the table says the fine-tune fits only the larger; 13B on
    one a100 is refused naming the profile's setting; the config's key, where given, wins."""
    from forgetmap.config import preflight

    four = {"gpu": 4, "mem_mb": 100000}
    h100 = planned(tmp_path, "7b", {"processes": 4}, four, gpu_models={"finetune": {"set-resources finetune": "h100"}})
    assert h100.finetune_settings("m", "city_qa")["gradient_checkpointing"] is True
    a100 = planned(tmp_path, "7b", {"processes": 4, "batch_size": 2}, four,
                   gpu_models={"finetune": {"default-resources": "a100"}})
    assert a100.finetune_settings("m", "city_qa")["gradient_checkpointing"] == "auto"
    preflight.check(a100)
    table = capsys.readouterr().err
    assert re.search(r"m +finetune \(2 tasks: city_qa, ...\) +4 +auto +\d\d\.\d +40-80", table), table
    assert "fits a 80 GiB card, not a 40 GiB one: profile setting default-resources: gpu_model=a100 names both" in table
    with pytest.raises(ConfigError, match=r"profile setting set-resources finetune: gpu_model=a100: finetune \(2 tasks: "
                                          r"city_qa, ...\) of model 'm' needs 2\d\d.\d GiB .* each GPU has at most 80.0 "
                                          r"GiB: shard it"):
        preflight.check(planned(tmp_path, "13b", {}, {"gpu": 1}, gpu_models={"finetune": {"set-resources finetune": "a100"}}))
    configured = planned(tmp_path, "7b", {"processes": 4}, {**four, "gpu_memory_gib": 79.6},
                         gpu_models={"finetune": {"set-resources finetune": "a100"}})
    assert configured.gpu_memory("m", "finetune").exact == 79.6 * GIB


def test_every_rule_that_claims_a_stages_gpus_is_sized_against_the_gpu_model_named_for_it():
    """rules/common.smk's STAGE_RULES lists each rule whose `gpu` is a stage's resource (a rule added without it
    would be submitted to a GPU model nobody sized it for)."""
    import ast
    from pathlib import Path

    rules = Path(__file__).resolve().parents[2] / "rules"
    common = (rules / "common.smk").read_text()
    stage_rules = ast.literal_eval(re.search(r"STAGE_RULES = (\{.*?\})\n", common, re.S).group(1))
    found: dict = {}
    for path in rules.glob("*.smk"):
        for rule, body in re.findall(r"^(?:rule|use rule \w+ as) (\w+)(?: with)?:(.*?)(?=^rule |^use rule |\Z)",
                                     path.read_text(), re.S | re.M):
            for stage in re.findall(r'gpu=resource\("(\w+)", "gpu"\)', body):
                found.setdefault(stage, set()).add(rule)
    assert {stage: set(names) for stage, names in stage_rules.items()} == {s: found[s] for s in stage_rules}
    assert set(found) - set(stage_rules) == {"base"}  # the demo's pretraining: sized by nothing yet


def test_a_job_whose_forward_cannot_run_on_the_meta_device_is_listed_unchecked_and_planning_goes_on(
        tmp_path, monkeypatch, capsys):
    """An architecture's own code may read a value back from a tensor the meta device cannot give: its score job
    is listed as not traced, with why, and nothing is refused on a guess."""
    from forgetmap import memory
    from forgetmap.config import preflight

    def cannot(*args):
        raise RuntimeError("Tensor.item() cannot be called on meta tensors\nmore")

    monkeypatch.setattr(memory, "score_need", cannot)
    preflight.check(planned(tmp_path, "13b", {}, {"gpu": 0}, stages={"score": {"gpu": 1, "gpu_memory_gib": 24}}))
    table = capsys.readouterr().err
    assert re.search(r"m +score \(torch, with generation\) +1 +- +\? +not traced on the meta device \(RuntimeError: "
                     r"Tensor.item\(\) cannot be called on meta tensors\): not checked", table), table
