"""Bring your own model: real Hugging Face architectures (tiny random-weight stand-ins with tokenizers
trained here), scored and checked as a researcher's first run would meet them."""

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from forgetmap.errors import ConfigError, ForgetmapError
from forgetmap.plan import Plan
from standins import TULU_TEMPLATE, cache_standin, save_standin, sentences


def corpus_without_items(n: int = 12) -> pd.DataFrame:
    """A plain pretraining-style corpus: lm documents and a few chat rows, no `answer` column at all."""
    texts = sentences(n, seed=3)
    kinds = ["lm"] * (n - 3) + ["chat"] * 3
    return pd.DataFrame({"example_id": [f"doc{i}" for i in range(n)], "source": ["web"] * (n - 3) + ["dialog"] * 3,
                         "kind": kinds, "text": [t if k == "lm" else None for t, k in zip(texts, kinds)],
                         "prompt": [None if k == "lm" else t for t, k in zip(texts, kinds)],
                         "response": [None if k == "lm" else "Because the river remembers." for k in kinds]})


def plain_nll(model, ids: list[int], start: int, end: int) -> float:
    """The reference: one example, full logits, log-softmax, the span's mean NLL."""
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    return float(-np.mean([logp[t - 1, ids[t]].item() for t in range(start, end)]))


def score_settings(**overrides) -> dict:
    from forgetmap.config import with_defaults
    from forgetmap.config.schema import SCORE

    return {**with_defaults(SCORE, {"device": "cpu", "token_budget": 256, "max_length": 24}),
            "chat_template": "auto", **overrides}


@pytest.mark.parametrize("architecture, template", [("gpt_neox", None), ("olmo2", TULU_TEMPLATE), ("olmo", None)])
def test_a_shard_without_items_scores_as_plain_transformers_does(tmp_path, architecture, template):
    from forgetmap.score import score_shard

    model_dir = save_standin(tmp_path / "model", architecture, template)
    shard = tmp_path / "shard.parquet"
    corpus_without_items().to_parquet(shard)
    summary = score_shard(str(model_dir), str(shard), score_settings(max_length=64), 1, str(tmp_path / "scores.parquet"))
    scores = pd.read_parquet(tmp_path / "scores.parquet")
    assert list(scores.columns) == ["example_id", "nll", "n_tokens", "n_bytes"] and scores["nll"].notna().all()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    frame = corpus_without_items()
    for i in (0, 10):  # an lm document and a chat row, by hand
        row = frame.iloc[i]
        if row.kind == "lm":
            ids = tok(row.text)["input_ids"]
            expected = plain_nll(model, ids, 1, len(ids))
            # bits per byte's denominator: the scored tokens' text (all but the first token), in UTF-8 bytes
            assert scores["n_bytes"][i] == len(tok.decode(ids[1:]).encode()) < len(row.text.encode())
        else:
            if template:  # the tokenizer's own template (auto): Tulu's markers, EOS after the response
                prefix = tok.apply_chat_template([{"role": "user", "content": row.prompt}], tokenize=False,
                                                 add_generation_prompt=True)
            else:  # no template of its own: the paper's OLMo format
                prefix = f"{tok.eos_token}<|user|>\n{row.prompt}\n<|assistant|>\n"
            head = tok(prefix, add_special_tokens=False)["input_ids"]
            body = tok(row.response, add_special_tokens=False)["input_ids"]
            expected = plain_nll(model, head + body, len(head), len(head) + len(body))
            assert scores["n_bytes"][i] == len(row.response.encode())  # the response, whatever the template
        assert scores["nll"][i] == pytest.approx(expected, abs=1e-5)
    assert summary["chat_template"] == ("tokenizer" if template else "olmo") and summary["truncated"] == 0
    assert summary["pad_token"] is not None and summary["pad_token_from"] in ("tokenizer", "vocabulary", "eos")


def test_the_job_says_what_it_chose_pad_token_and_truncation(tmp_path):
    from forgetmap.score import score_shard

    model_dir = save_standin(tmp_path / "model", "gpt_neox")  # Pythia-like: no pad token, <|padding|> in vocab
    long = corpus_without_items()
    long.loc[0, "text"] = " ".join(["river"] * 60)
    long.to_parquet(tmp_path / "shard.parquet")
    summary = score_shard(str(model_dir), str(tmp_path / "shard.parquet"), score_settings(), 1,
                          str(tmp_path / "s.parquet"))
    assert summary["pad_token"] == "<|padding|>" and summary["pad_token_from"] == "vocabulary"
    assert summary["truncated"] >= 1 and summary["truncated_tokens_max"] >= 30 and summary["max_length"] == 24


def test_a_model_directory_without_a_tokenizer_is_refused(tmp_path):
    from forgetmap.models import load_tokenizer

    model_dir = save_standin(tmp_path / "model", "gpt_neox", tokenizer=False)
    with pytest.raises(ForgetmapError, match="no usable tokenizer"):
        load_tokenizer(model_dir)  # transformers alone gives a 2-token tokenizer that encodes text to nothing


def pretrained_config(path: str, **model) -> dict:
    return {"upstream": {"web": {"format": "parquet", "path": "unused"}}, "categories": {"c": {"group": "in_domain"}},
            "tasks": {"t1": {"category": "c", "path": "t1.jsonl"}},
            "models": {"m": {"upstream": "web", "base": {"kind": "pretrained", "path": path},
                             "resources": {s: {"gpu": 0} for s in ("finetune", "score", "semantic", "gradient")},
                             **model}}}


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    corpus_without_items().to_parquet(tmp_path / "web.parquet")
    (tmp_path / "t1.jsonl").write_text('{"prompt": "q", "response": "a"}\n' * 4)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def plan_with(config: dict) -> Plan:
    config["upstream"]["web"]["path"] = "web.parquet"
    return Plan(config)


def test_preflight_refuses_a_base_without_tokenizer_naming_the_key(data_dir):
    from forgetmap.config import preflight

    save_standin(data_dir / "model", "gpt_neox", tokenizer=False)
    plan = plan_with(pretrained_config(str(data_dir / "model")))
    with pytest.raises(ConfigError, match=r"models\.m\.base\.path: .* no tokenizer files"):
        preflight.check(plan)


def test_preflight_refuses_lora_targets_the_architecture_lacks(data_dir):
    from forgetmap.config import preflight

    save_standin(data_dir / "model", "gpt_neox")  # GPTNeoX has query_key_value, not q_proj / v_proj
    plan = plan_with(pretrained_config(str(data_dir / "model"), finetune={"method": "lora"}))
    with pytest.raises(ConfigError, match=r"models\.m\.finetune\.lora\.target_modules: q_proj, v_proj not in .*"
                                          r"query_key_value"):
        preflight.check(plan)
    ok = pretrained_config(str(data_dir / "model"), finetune={"method": "lora", "lora": {"target_modules": ["query_key_value"]}})
    preflight.check(plan_with(ok))
    # a task that is only forecast (the only LoRA one here) is fine-tuned all the same: its targets are checked
    forecast = pretrained_config(str(data_dir / "model"))
    forecast["tasks"].update(t2={"category": "c", "path": "t1.jsonl"},
                             t3={"category": "c", "path": "t1.jsonl", "forecast": True, "finetune": {"method": "lora"}})
    forecast["forecast"] = {"k": 2}
    with pytest.raises(ConfigError, match=r"models\.m\.finetune\.lora\.target_modules: q_proj, v_proj not in"):
        preflight.check(plan_with(forecast))


def test_preflight_checks_arena_knobs_against_a_gptneox_base(data_dir):
    from forgetmap.config import preflight

    save_standin(data_dir / "model", "gpt_neox")
    config = pretrained_config(str(data_dir / "model"))
    config["tasks"]["t2"] = {"category": "c", "path": "t1.jsonl"}
    config["prediction"] = {"splits": {"s": {"test": ["t1"]}}, "k": 2}
    config["mitigation"] = {"tasks": ["t1"], "heldout": 2, "arms": {"top": {"train_top": 3}}}
    with pytest.raises(ConfigError, match=r"mitigation\.arms\.top\.train_top: value 3: the base of model 'm' "
                                          r"\(GPTNeoXForCausalLM\) has 2 transformer blocks"):
        preflight.check(plan_with(config))
    config["mitigation"]["arms"] = {"lora": {"lora": {"target_modules": ["q_proj"]}}}
    with pytest.raises(ConfigError, match=r"arms\.lora\.lora\.target_modules: q_proj not in .*query_key_value"):
        preflight.check(plan_with(config))
    config["mitigation"]["arms"] = {"top": {"train_top": 2}, "attn": {"train_modules": ["attention"]},
                                    "lora": {"lora": {"r": [2, 4], "target_modules": ["query_key_value"]}}}
    preflight.check(plan_with(config))


def test_preflight_refuses_the_tokenizer_template_where_there_is_none(data_dir):
    from forgetmap.config import preflight

    save_standin(data_dir / "model", "gpt_neox")
    plan = plan_with(pretrained_config(str(data_dir / "model"), chat_template="tokenizer"))
    with pytest.raises(ConfigError, match=r"models\.m\.chat_template: 'tokenizer', but .* no chat template"):
        preflight.check(plan)
    preflight.check(plan_with(pretrained_config(str(data_dir / "model"))))  # auto: olmo


def test_preflight_refuses_gpu_resources_above_the_machine_on_a_local_run(data_dir, monkeypatch):
    from forgetmap.config import preflight

    monkeypatch.setenv("FORGETMAP_GPU_COUNT", "0")
    save_standin(data_dir / "model", "gpt_neox")
    config = pretrained_config(str(data_dir / "model"))
    config["models"]["m"]["resources"]["finetune"]["gpu"] = 1
    plan = plan_with(config)
    with pytest.raises(ConfigError, match=r"models\.m\.resources\.finetune\.gpu: value 1, but this machine has 0"):
        preflight.check_gpus(plan)


def test_a_local_run_without_gpus_names_every_gpu_key_at_once_with_the_lines_that_run_it_on_the_cpu(data_dir,
                                                                                                     monkeypatch):
    """A pretrained base's defaults ask for a GPU in four stages: one error names all four (a trial met them one
    run at a time), and the YAML it gives, merged into the config, lets the run start."""
    import yaml

    from forgetmap.config import preflight

    monkeypatch.setenv("FORGETMAP_GPU_COUNT", "0")
    save_standin(data_dir / "model", "gpt_neox")
    config = pretrained_config(str(data_dir / "model"))
    config["models"]["m"]["resources"] = {}  # every stage as the schema's defaults give it
    with pytest.raises(ConfigError) as refused:
        preflight.check_gpus(plan_with(config))
    said = str(refused.value)
    stages = ("finetune", "score", "semantic", "gradient")
    for stage in stages:
        assert f"models.m.resources.{stage}.gpu: value 1" in said
    given = yaml.safe_load(said[said.index("models:"):said.index("\nor submit")])
    assert given == {"models": {"m": {"resources": {stage: {"gpu": 0} for stage in stages}}}}
    config["models"]["m"]["resources"] = given["models"]["m"]["resources"]
    preflight.check_gpus(plan_with(config))


def _importable() -> dict:
    """forgetmap importable in a bare environment, from the checkout under test (installed or not)."""
    return {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "workflow")}


def test_an_hf_id_missing_from_the_cache_fails_at_once_saying_how_to_fetch_it(data_dir, tmp_path):
    config = pretrained_config("allenai/OLMo-1B-hf")
    config["upstream"]["web"]["path"] = "web.parquet"
    env = {"HF_HUB_CACHE": str(tmp_path / "empty-cache"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           **_importable()}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", f"from forgetmap.plan import Plan; Plan({config!r})"],
                          capture_output=True, text=True, env=env, cwd=data_dir)
    assert time.perf_counter() - started < 30 and proc.returncode != 0
    assert "config key models.m.base.path" in proc.stderr and "hf download allenai/OLMo-1B-hf" in proc.stderr


def test_an_hf_id_in_the_cache_is_found_without_network_and_its_identity_recorded(data_dir, tmp_path):
    snapshot = cache_standin(tmp_path / "hub", "EleutherAI/pythia-1b", "gpt_neox")
    config = pretrained_config("EleutherAI/pythia-1b")
    config["upstream"]["web"]["path"] = "web.parquet"
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **_importable()}
    code = f"import json; from forgetmap.plan import Plan; print(json.dumps(Plan({config!r}).base_settings('m')))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=data_dir)
    assert proc.returncode == 0, proc.stderr
    settings = json.loads(proc.stdout)
    assert settings["local"] == str(snapshot) and len(settings["identity"]) == 16


def test_the_base_identity_changes_with_its_tokenizer_or_weights(data_dir):
    from forgetmap.pretrained import identity

    model = save_standin(data_dir / "model", "gpt_neox")
    before = identity(model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 77}))
    after_tokenizer = identity(model)
    with open(model / "model.safetensors", "ab") as handle:
        handle.write(b"\0" * 8)
    assert len({before, after_tokenizer, identity(model)}) == 3
    settings = plan_with(pretrained_config(str(model))).base_settings("m")
    assert settings["identity"] == identity(model) and settings["local"] == str(model.resolve())


def test_a_large_weight_file_is_identified_by_sampled_content_not_by_its_size_or_time(tmp_path):
    """A weight file far larger than what is read: a change of one tensor's worth of values in its middle
    changes the identity; the same bytes copied (a new modification time) do not."""
    import shutil

    from forgetmap import pretrained

    rng = np.random.default_rng(0)
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    values = rng.standard_normal(6 * 2**20 // 4).astype(np.float32)  # 24 MiB: 4.8x what is sampled
    values.tofile(model / "model.safetensors")
    before = pretrained.identity(model)
    copy = shutil.copytree(model, tmp_path / "copy")
    assert pretrained.identity(copy) == before
    changed = values.copy()
    changed[3 * 2**20 // 4: 4 * 2**20 // 4] *= 1.01  # one MiB in the middle, retrained
    changed.tofile(model / "model.safetensors")
    assert (model / "model.safetensors").stat().st_size == values.nbytes and pretrained.identity(model) != before


def test_lora_with_the_vllm_backend_is_a_config_error_before_any_finetune(data_dir):
    save_standin(data_dir / "model", "llama")
    config = pretrained_config(str(data_dir / "model"), finetune={"method": "lora"}, score={"backend": "vllm"})
    with pytest.raises(ConfigError, match=r"models\.m\.score\.backend: vllm scores full checkpoints"):
        plan_with(config)


def test_the_scorer_finds_the_transformer_body_of_a_lora_model(tmp_path):
    from forgetmap.nll import TorchScorer, score_naive
    from forgetmap.data.chat import encode_lm
    from forgetmap.train import attach_lora
    from standins import build_model, train_tokenizer

    tok = train_tokenizer("llama")
    model = attach_lora(build_model("llama", tok), {"r": 4, "alpha": 8, "dropout": 0.0,
                                                     "target_modules": ["q_proj", "v_proj"]}, 0)
    for name, param in model.named_parameters():  # a trained adapter: B away from zero
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.5)
    model.eval()
    encoded = encode_lm(tok, sentences(6), 32)
    scorer = TorchScorer(model, tok.pad_token_id or 0)
    nll, _ = scorer.score(encoded)
    assert scorer.use_hidden  # body + head reproduce the LoRA model's logits
    np.testing.assert_allclose(nll, score_naive(model, encoded), atol=1e-5)
    merged = model.merge_and_unload()
    np.testing.assert_allclose(nll, score_naive(merged, encoded), atol=1e-4)


def test_reduction_is_undefined_where_plain_finetuning_forgot_nothing(tmp_path):
    from forgetmap.matrix import ForgettingMatrix
    from forgetmap.mitigation.summary import per_run

    ids = np.array(["a", "b"])
    matrix = ForgettingMatrix(np.zeros((1, 2)), ["t"], ids, np.array(["s", "s"]), np.array([1.0, 1.0], np.float32))
    runs = []
    for arm, task, nll in (("none", "t", [0.9, 0.9]), ("r", "t", [0.8, 0.8]), ("none", "u", [1.5, 1.5]),
                           ("r", "u", [1.2, 1.2])):
        path = tmp_path / f"{arm}-{task}.parquet"
        pd.DataFrame({"example_id": ids, "nll": np.array(nll, np.float32)}).to_parquet(path)
        path.with_suffix(".json").write_text(json.dumps({"validation_nll": 1.0, "tokens": 10, "seconds": 1.0}))
        runs.append({"arm": arm, "task": task, "seed": 0, "scores": str(path)})
    frame = per_run(matrix, runs).set_index(["arm", "task"])
    assert np.isnan(frame.loc[("r", "t"), "reduction"])  # F_none = -0.1: nothing to reduce
    assert frame.loc[("r", "u"), "reduction"] == pytest.approx(1 - 0.2 / 0.5)


@pytest.mark.parametrize("architecture", ["gpt_neox", "olmo", "olmo2"])
def test_greedy_answers_of_real_architectures_match_a_full_logits_loop(architecture):
    """Left-padded, cached, next-token-logits-only decoding (free-form items) against the plain loop."""
    from helpers import greedy_tokens
    from standins import build_model, train_tokenizer

    tok = train_tokenizer(architecture)
    model = build_model(architecture, tok)
    contexts = [np.array([5, 6, 7, 8]), np.array([9, 10])]
    out = greedy_tokens(model, contexts, 1, tok.eos_token_id, 5, 512)
    for context, got in zip(contexts, out):
        ids, expected = list(context), []
        with torch.no_grad():
            for _ in range(5):
                token = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
                if token == tok.eos_token_id:
                    break
                expected.append(token)
                ids.append(token)
        assert got.tolist() == expected


@pytest.mark.parametrize("given", ["file", "directory"])
def test_a_gguf_file_given_as_a_base_is_refused_at_planning_saying_how_to_convert_it(data_dir, given):
    """A GGUF file (or a directory of them without config.json) is no model directory: planning refuses it, naming
    the key and the `forgetmap from-gguf` command that makes one."""
    folder = data_dir / "gguf"
    folder.mkdir()
    (folder / "Model.Q4_1.gguf").write_bytes(b"GGUF")
    path = str(folder / "Model.Q4_1.gguf") if given == "file" else str(folder)
    with pytest.raises(ConfigError) as refused:
        plan_with(pretrained_config(path))
    said = str(refused.value)
    assert "models.m.base.path" in said and "Model.Q4_1.gguf" in said
    assert f"forgetmap from-gguf {folder / 'Model.Q4_1.gguf'} --out DIRECTORY" in said
