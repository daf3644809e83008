"""A researcher's first run: their own model directory (a GPTNeoX stand-in, Pythia-shaped, no chat
template, no pad token), a jsonl corpus without items, FLAN-format json tasks and a Tulu-style jsonl."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from helpers import by_rule, clone_workdir, library_warnings, make_workdir, planned_jobs, snakemake
from standins import save_standin, sentences

pytestmark = pytest.mark.workflow
STAGES = ("base", "finetune", "score", "semantic", "gradient", "analysis")


def byo_config() -> dict:
    return {
        "seed": 0, "shard_size": 8,
        "upstream": {"web": {"format": "jsonl", "path": "resources/web.jsonl"}},
        "categories": {"flan": {"group": "in_domain"}, "tulu": {"group": "out_of_domain"}},
        "tasks": {
            # one entry, one task per file: cola, rte, wic
            "flan": {"category": "flan", "path": "resources/flan/{task}_train.json",
                     "validation_path": "resources/flan/{task}_validation.json",
                     "columns": {"prompt": "inputs", "response": "targets"}},
            "lima": {"category": "tulu", "path": "resources/tulu/lima.jsonl", "validation_fraction": 0.0},
        },
        "prediction": {"k": 5, "seeds": 1, "methods": ["mean"], "budget": 3,
                       "probe_evaluation": {"method": "mean", "ks": [3], "draws": 2, "strategies": ["random"]},
                       "splits": {"id": {"test": ["rte"]}}},
        # an online replay arm on a LoRA model: its probes are scored through the adapters mid-training
        "mitigation": {"tasks": {"split": "id"}, "heldout": 4,
                       "arms": {"online": {"replay": "online", "method": "mean", "ratio": 0.5, "probes": 3}}},
        "models": {"pythia": {
            "upstream": "web", "base": {"kind": "pretrained", "path": "models/pythia"},
            "finetune": {"method": "lora", "lora": {"r": 4, "target_modules": ["query_key_value"]}, "steps": 2,
                         "batch_size": 2, "lr": 1e-2, "warmup_steps": 0, "max_length": 40, "seed": 0},
            "score": {"token_budget": 256, "max_length": 40},
            "correlations": {"dim": 16, "max_task_examples": 4, "max_length": 40, "semantic": False},
            "resources": {s: {"gpu": 0, "threads": 1, "mem_mb": 1000, "runtime": 10} for s in STAGES}}},
    }


def write_user_data(workdir):
    """The user's files, in the documented formats (none of them the demo's)."""
    resources = workdir / "resources"
    (resources / "flan").mkdir(parents=True)
    (resources / "tulu").mkdir()
    texts = sentences(20, seed=11)
    rows = [{"example_id": f"web-{i}", "source": "c4" if i % 2 else "wiki", "kind": "lm", "text": t}
            for i, t in enumerate(texts[:17])]
    rows += [{"example_id": f"chat-{i}", "source": "tulu", "kind": "chat", "prompt": t, "response": "It does."}
             for i, t in enumerate(texts[17:])]
    (resources / "web.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for seed, task in enumerate(("cola", "rte", "wic")):
        for split, n in (("train", 6), ("validation", 2)):
            records = [{"inputs": f"{task}: {t}", "targets": "yes" if i % 2 else "no"}
                       for i, t in enumerate(sentences(n, seed=20 + n + 3 * seed))]
            (resources / "flan" / f"{task}_{split}.json").write_text(json.dumps(records))
    (resources / "tulu" / "lima.jsonl").write_text("".join(
        json.dumps({"prompt": t, "response": "A short answer: " + t.lower()}) + "\n" for t in sentences(6, seed=5)))
    save_standin(workdir / "models/pythia", "gpt_neox")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = make_workdir(tmp_path_factory.mktemp("byo") / "wf", byo_config())
    write_user_data(workdir)
    proc = snakemake(workdir)
    (workdir / "run.out").write_text(proc.stdout + proc.stderr)
    return workdir


def test_your_own_model_and_files_give_a_matrix_on_the_first_try(finished):
    matrix = pd.read_parquet(finished / "results/pythia/forgetting.parquet")
    assert list(matrix.columns[3:]) == ["cola", "rte", "wic", "lima"] and len(matrix) == 20
    assert matrix[["cola", "rte", "wic", "lima"]].notna().all().all()
    assert (finished / "results/pythia/lowrank/r2.tsv").exists()
    assert (finished / "results/pythia/correlations/gradient.tsv").exists()
    assert "Traceback" not in (finished / "run.out").read_text()
    assert library_warnings(finished) == []  # LoRA through peft, a GPTNeoX, today's transformers: no warning


def test_the_base_scores_are_what_plain_transformers_computes(finished):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(finished / "models/pythia").eval()
    tok = AutoTokenizer.from_pretrained(finished / "models/pythia")
    scores = pd.read_parquet(finished / "results/pythia/scores/base/shard-0.parquet")
    text = json.loads((finished / "resources/web.jsonl").read_text().splitlines()[3])["text"]
    ids = tok(text)["input_ids"][:40]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0], -1)
    expected = -np.mean([logp[t - 1, ids[t]].item() for t in range(1, len(ids))])
    assert scores["nll"][3] == pytest.approx(expected, abs=1e-5)


def test_the_online_arm_measures_its_probes_through_the_lora_adapters(finished):
    summary = pd.read_csv(finished / "results/pythia/mitigation/summary.tsv", sep="\t")
    assert set(summary["arm"]) == {"none", "online"}
    facts = json.loads((finished / "results/pythia/mitigation/online/seed-0/rte.json").read_text())
    assert facts["online"]["replayed_online"] >= 1 and len(facts["online"]["probe_ids"]) == 3


def test_each_job_says_the_pad_token_and_template_it_chose(finished):
    summary = json.loads((finished / "results/pythia/checkpoints/lima/train_summary.json").read_text())
    assert summary["pad_token"] == "<|padding|>" and summary["pad_token_from"] == "vocabulary"
    assert summary["chat_template"] == "olmo"  # no template of its own: the paper's format
    pointer = json.loads((finished / "results/pythia/base/base.json").read_text())
    assert pointer["local"] == str((finished / "models/pythia").resolve()) and len(pointer["identity"]) == 16


def test_replacing_the_base_tokenizer_under_the_same_path_reruns_what_depends_on_it(finished, tmp_path):
    workdir = clone_workdir(finished, tmp_path / "wf")
    config_file = workdir / "models/pythia/tokenizer_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "model_max_length": 99}))
    counts = by_rule(planned_jobs(workdir))
    assert counts["base_model"] == 1 and counts["finetune"] == 4 and counts["score"] == 15  # 5 runs x 3 shards


def test_retrained_weights_of_the_same_shape_under_the_same_path_rerun_what_depends_on_them(finished, tmp_path):
    """Continued pretraining saved over the old checkpoint: the same file names and sizes, new values."""
    from transformers import AutoModelForCausalLM

    workdir = clone_workdir(finished, tmp_path / "wf")
    weights = workdir / "models/pythia/model.safetensors"
    size = weights.stat().st_size
    model = AutoModelForCausalLM.from_pretrained(workdir / "models/pythia")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    model.save_pretrained(workdir / "models/pythia")
    assert weights.stat().st_size == size
    counts = by_rule(planned_jobs(workdir))
    assert counts["base_model"] == 1 and counts["finetune"] == 4 and counts["score"] == 15


def test_a_model_directory_without_a_tokenizer_fails_before_any_job(tmp_path):
    workdir = make_workdir(tmp_path / "wf", byo_config())
    write_user_data(workdir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (workdir / "models/pythia" / name).unlink()
    proc = snakemake(workdir, "--dry-run", check=False)
    assert proc.returncode != 0 and "config key models.pythia.base.path" in proc.stdout + proc.stderr
    assert not (workdir / "results").exists()


def test_gpu_resources_left_at_their_defaults_fail_a_local_cpu_run_before_any_job(tmp_path):
    config = byo_config()
    del config["models"]["pythia"]["resources"]["finetune"]  # the default: one GPU per fine-tune
    workdir = make_workdir(tmp_path / "wf", config)
    write_user_data(workdir)
    snakemake(workdir, "--dry-run")  # a dry run needs no GPU
    proc = snakemake(workdir, check=False, env={"FORGETMAP_GPU_COUNT": "0"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config key models.pythia.resources.finetune.gpu: value 1" in out
    assert "Traceback" not in out and not (workdir / "results").exists()
