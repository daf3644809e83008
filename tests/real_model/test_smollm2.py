"""A real pretrained model through the workflow: the shipped config/examples/smollm2.yaml run in miniature on
SmolLM2-135M-Instruct (converted once from the package index's GGUF: tests/smollm2.py), over the demo's own data:
three of its tasks, 84 upstream examples (lm text, chat turns, 12 quiz items), short fine-tunes, the matrix and
its analyses, one monitored (forecast) fine-tune; then a post-training map row of one of those checkpoints, added
to the same config, running only its own jobs. Every NLL is what plain transformers computes."""

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from cached_env import python_or_skip
from helpers import REPO, data_file, library_warnings, make_workdir, snakemake

pytestmark = [pytest.mark.workflow, pytest.mark.real_model]
TASKS = ("city_qa", "add_qa", "reverse_qa")
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"  # the template's default system turn


def miniature(model_dir) -> dict:
    """The shipped example with only its base path, sizes, steps and tasks overridden."""
    cfg = yaml.safe_load((REPO / "config/examples/smollm2.yaml").read_text())
    cfg["shard_size"] = 84
    cfg["keep_checkpoints"] = True  # the map row reads one
    cfg["upstream"]["demo"]["n_examples"] = 84  # 12 of each of its seven domains
    cfg["categories"] = {"world": {"group": "in_domain"}, "math": {"group": "in_domain"},
                         "string": {"group": "out_of_domain"}}
    cfg["tasks"] = {"city_qa": {"category": "world", "n_examples": 12},
                    "add_qa": {"category": "math", "n_examples": 12},
                    "reverse_qa": {"category": "world", "n_examples": 12, "forecast": "check"}}
    cfg["prediction"] = {"k": 10, "seeds": 2, "splits": {"id": {"test": ["reverse_qa"]}}}
    cfg["forecast"] = {"k": 10, "probes": "dopt", "method": "mf", "audit": 24}  # 34 examples at each check
    spec = cfg["models"]["smollm2"]
    spec["base"]["path"] = str(model_dir)
    spec["finetune"].update(steps=3, batch_size=2, max_length=48, monitor={"every": 1})
    spec["score"].update(max_length=48, token_budget=1024)
    spec["correlations"].update(gradient=False, max_task_examples=4, max_length=48)  # 135M gradients: the example's
    spec["resources"] = {stage: {"gpu": 0, "threads": 1, "mem_mb": 3000}
                         for stage in ("finetune", "score", "semantic", "gradient", "analysis")}
    return cfg


@pytest.fixture(scope="module")
def model_dir():
    import smollm2

    return python_or_skip(smollm2, "SmolLM2-135M-Instruct")


@pytest.fixture(scope="module")
def finished(model_dir, tmp_path_factory):
    cfg = miniature(model_dir)
    workdir = make_workdir(tmp_path_factory.mktemp("smollm2") / "wf", cfg)
    proc = snakemake(workdir, timeout=1200)
    (workdir / "run.out").write_text(proc.stdout + proc.stderr)
    return workdir, cfg


def plain_nll(net, ids: list[int], start: int, end: int) -> float:
    """The mean NLL of tokens start..end-1, one example alone through plain transformers in fp32."""
    with torch.no_grad():
        logits = net(input_ids=torch.tensor([ids])).logits[0]
    return torch.nn.functional.cross_entropy(logits[start - 1:end - 1], torch.tensor(ids[start:end])).item()


def test_the_real_models_matrix_and_analyses_are_built_without_a_traceback(finished):
    workdir, _ = finished
    matrix = pd.read_parquet(workdir / "results/smollm2/forgetting.parquet")
    assert list(matrix.columns[3:]) == list(TASKS) and len(matrix) == 84
    z = matrix[list(TASKS)].to_numpy()
    assert np.isfinite(z).all() and (np.abs(z) > 1e-4).mean() > 0.9  # real fine-tunes move real rows
    for path in ("lowrank/r2.tsv", "correlations/semantic.tsv", "correlations/cross_task.tsv",
                 "prediction/scores.tsv", "correctness/rates.tsv", "forecast/trajectory.tsv", "explorer.html"):
        assert (workdir / "results/smollm2" / path).exists(), path
    trajectory = pd.read_csv(workdir / "results/smollm2/forecast/trajectory.tsv", sep="\t")
    assert set(trajectory["task"]) == {"reverse_qa"} and trajectory["step"].nunique() >= 3  # every step checked
    # the headline (the audit-corrected estimate) inside the interval logged beside it at every check
    assert (trajectory["estimate_lower_0.9"] <= trajectory["estimate"]).all()
    assert (trajectory["estimate"] <= trajectory["estimate_upper_0.9"]).all()
    assert "Traceback" not in (workdir / "run.out").read_text() and library_warnings(workdir) == []


def test_every_base_and_fine_tuned_nll_is_what_plain_transformers_computes_through_the_instruct_template(
        finished, model_dir):
    """Each upstream example's NLL, one at a time through plain transformers (lm: every token but the first of the
    text as the tokenizer encodes it; chat: the response's tokens after the rendered prompt, which carries the
    template's default system turn), equals the scored one to 1e-5 of itself in fp32, for the base and a fine-tune
    (batched and padded, the same sums run in another order through 30 layers and a 49,152-way softmax: measured
    up to 2.5e-6 of the value, 1.3e-5 nats on a 5.26-nat answer of two tokens)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    workdir, cfg = finished
    tok = AutoTokenizer.from_pretrained(model_dir)
    corpus = pd.read_parquet(data_file(workdir, "demo", 0))
    limit = cfg["models"]["smollm2"]["score"]["max_length"]
    for run, directory in (("base", model_dir), ("city_qa", workdir / "results/smollm2/checkpoints/city_qa")):
        net = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
        scores = pd.read_parquet(workdir / f"results/smollm2/scores/{run}/shard-0.parquet").set_index("example_id")
        checked = {"lm": 0, "chat": 0}
        for row in corpus.itertuples():
            if row.kind == "lm":
                ids = tok(row.text)["input_ids"][:limit]
                start, end = 1, len(ids)
            else:
                prompt = tok.apply_chat_template([{"role": "user", "content": row.prompt}], tokenize=False,
                                                 add_generation_prompt=True)
                assert SYSTEM in prompt
                head = tok(prompt, add_special_tokens=False)["input_ids"]
                body = tok(row.response, add_special_tokens=False)["input_ids"]
                tail = tok("<|im_end|>\n", add_special_tokens=False)["input_ids"]
                ids = (head + body + tail)[-limit:]
                end = len(ids) - len(tail)
                start = max(1, end - len(body))
            found = scores.loc[row.example_id]
            assert found["n_tokens"] == end - start
            plain = plain_nll(net, ids, start, end)
            assert abs(found["nll"] - plain) <= 1e-5 * max(1.0, abs(plain)), (run, row.example_id)
            checked[row.kind] += 1
        assert checked["lm"] >= 60 and checked["chat"] >= 20


def test_a_post_training_map_row_of_a_fine_tune_added_to_the_config_runs_only_its_own_jobs(finished, tmp_path):
    """The city_qa checkpoint as a row of a second model (a map: nothing fine-tuned), compared with the same base:
    only the new model's jobs run, its base not scored again (the first model's scores are the same base's,
    scored the same way), and its row's Z is the first model's city_qa column (the same weights, the same
    template, the same examples)."""
    workdir, cfg = finished
    spec = cfg["models"]["smollm2"]
    cfg["models"]["smollm2_map"] = {
        "upstream": "demo", "base": dict(spec["base"]), "chat_template": "tokenizer", "tasks": [],
        "checkpoints": {"city_qa_tuned": {"path": str(workdir / "results/smollm2/checkpoints/city_qa"),
                                          "category": "world"}},
        "score": dict(spec["score"]), "resources": {s: {"gpu": 0, "threads": 1, "mem_mb": 3000}
                                                    for s in ("score", "analysis")}}
    (tmp_path / "map.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))  # tasks in their order
    proc = snakemake(workdir, "--configfile", str(tmp_path / "map.yaml"), timeout=1200)
    ran = {line.split()[-1].rstrip(":") for line in (proc.stdout + proc.stderr).splitlines()
           if line.startswith(("rule ", "localrule "))}
    assert "finetune" not in ran and "Traceback" not in proc.stdout + proc.stderr
    assert not (workdir / "results/smollm2_map/scores/base").exists()
    row = pd.read_parquet(workdir / "results/smollm2_map/forgetting.parquet").set_index("example_id")["city_qa_tuned"]
    column = pd.read_parquet(workdir / "results/smollm2/forgetting.parquet").set_index("example_id")["city_qa"]
    np.testing.assert_allclose(row.loc[column.index], column, atol=1e-6)
