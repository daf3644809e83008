"""The shipped example configs (config/examples/*.yaml) with the data and models they expect, made here.

`example_config` writes, under a workdir, what a researcher would bring: the upstream corpus file, the
FLAN task files, local copies of the Hugging Face datasets (Tulu v2 with its `messages`, Dolly with
`context` and `category`, in the shapes the hub has them) and tiny stand-ins of the base models in a
Hugging Face cache (so `base.path` stays the config's hub id). It returns the example config with only
paths and, for `scale="mini"`, sizes, steps and a few tasks overridden: every task format, category
and split of the file stays. `paper` scale keeps the config as is for dry runs (ids only).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from standins import cache_standin, sentences

FLAN_TASKS = """aeslc ag_news_subset anli_r1 anli_r2 anli_r3 arc_challenge arc_easy bool_q cb cnn_dailymail cola
common_gen copa coqa cosmos_qa dart definite_pronoun_resolution drop e2e_nlg fix_punct gigaword glue_mrpc glue_qqp
hellaswag imdb_reviews math_dataset mnli_matched mnli_mismatched multi_news multirc natural_questions openbookqa
opinion_abstracts_idebate opinion_abstracts_rotten_tomatoes para_crawl_enes paws_wiki piqa qnli quac record rte
samsum sentiment140 snli squad_v1 squad_v2 sst2 story_cloze stsb trec trivia_qa true_case web_nlg_en wic
wiki_lingua_english_en wmt14_enfr wmt16_translate_csen wmt16_translate_deen wmt16_translate_fien
wmt16_translate_roen wmt16_translate_ruen wmt16_translate_tren wnli word_segment wsc yelp_polarity_reviews""".split()
FLAN_TASKS = [f"{t}_10templates" for t in FLAN_TASKS]
TULU_SUBSETS = ["open_orca", "oasst1", "lima", "code_alpaca", "gpt4_alpaca", "cot", "science.evidence_inference",
                "science.qasper_truncated_4000", "flan_v2", "sharegpt", "hard_coded", "wizardlm"]
DOLLY_CATEGORIES = ["brainstorming", "closed_qa", "information_extraction", "classification", "open_qa",
                    "general_qa", "creative_writing", "summarization"]
ARCHITECTURES = {"allenai/OLMo-1B-hf": "olmo", "EleutherAI/pythia-1b": "gpt_neox", "allenai/OLMo-2-1124-7B": "olmo2"}


def tulu_rows(per_subset: int, subsets=TULU_SUBSETS) -> list[dict]:
    """allenai/tulu-v2-sft-mixture's shape: dataset, id, messages (system turns and multi-turn included)."""
    rows = []
    for s, subset in enumerate(subsets):
        for i, text in enumerate(sentences(per_subset, seed=100 + s)):
            messages = [{"role": "user", "content": text}, {"role": "assistant", "content": f"Answer: {text.lower()}"}]
            if i % 3 == 1:
                messages = [{"role": "system", "content": "Answer briefly."}, *messages,
                            {"role": "user", "content": "And then?"}, {"role": "assistant", "content": "Nothing."}]
            rows.append({"dataset": subset, "id": f"{subset}_{i}", "messages": messages})
    return rows


def dolly_rows(per_category: int, categories=DOLLY_CATEGORIES) -> list[dict]:
    """databricks/databricks-dolly-15k's shape: instruction, context (often empty), response, category."""
    rows = []
    for c, category in enumerate(categories):
        for i, text in enumerate(sentences(per_category, seed=200 + c)):
            rows.append({"instruction": text, "context": "" if i % 2 else f"Background: {text[::-1]}",
                         "response": f"In short, {text.lower()}", "category": category})
    return rows


def flan_records(n: int, seed: int) -> list[dict]:
    return [{"inputs": f"Question: {t}\nOptions: yes, no", "targets": "yes" if i % 2 else "no"}
            for i, t in enumerate(sentences(n, seed=seed))]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def upstream_frame(n: int, texts: bool) -> pd.DataFrame:
    ids = np.char.add("doc-", np.arange(n).astype(str))
    body = sentences(n, seed=300) if texts else ["x"] * n
    sources = np.where(np.arange(n) % 3 == 0, "c4", np.where(np.arange(n) % 3 == 1, "wiki", "stack"))
    return pd.DataFrame({"example_id": ids, "source": sources, "kind": "lm", "text": body})


def example_config(workdir: Path, name: str, scale: str = "paper", n_upstream: int | None = None) -> Path:
    """Write the data and models `config/examples/{name}.yaml` expects under `workdir` and the config to
    run (paths overridden, `mini`: also sizes and a few tasks); returns that config's path. Run with
    HF_HUB_CACHE=workdir/hub."""
    repo = Path(__file__).resolve().parents[1]
    cfg = yaml.safe_load((repo / "config/examples" / f"{name}.yaml").read_text())
    mini = scale == "mini"
    for model in cfg["models"].values():
        path = model["base"]["path"]
        if not (workdir / "hub" / f"models--{path.replace('/', '--')}").exists():
            cache_standin(workdir / "hub", path, ARCHITECTURES[path])
    for corpus in cfg["upstream"].values():
        target = workdir / corpus["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        upstream_frame(n_upstream or (24 if mini else 100), texts=mini).to_parquet(target)
    datasets = {"allenai/tulu-v2-sft-mixture": lambda: tulu_rows(4 if mini else 1),
                "databricks/databricks-dolly-15k": lambda: dolly_rows(5 if mini else 1,
                                                                      DOLLY_CATEGORIES[:2] if mini else DOLLY_CATEGORIES)}
    for task in cfg["tasks"].values():
        if task.get("format") == "hf":  # the hub dataset as local files: only the path changes
            local = workdir / "resources/hf" / (task["dataset"].replace("/", "--") + ".jsonl")
            if not local.exists():
                write_jsonl(local, datasets[task["dataset"]]())
            task.update(dataset="json", data_files=str(local))
        elif "{task}" in task["path"] and not mini:  # every FLAN file (the miniature writes its three)
            for i, flan in enumerate(FLAN_TASKS):
                for split in ("train", "validation"):
                    path = workdir / task["path"].replace("{task}", flan).replace("_train", f"_{split}")
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(flan_records(1, seed=i)))
    if mini:
        miniature(cfg, workdir)
    out = workdir / "config" / f"{name}-{scale}.yaml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def miniature(cfg: dict, workdir: Path) -> None:
    """Sizes and steps of a CPU minute; a few tasks of each kind; every format, category and split kept."""
    flan = cfg["tasks"].get("flan")
    if flan is not None:  # two FLAN files: one trains the in-domain split, one is its test task
        test = cfg["prediction"]["splits"]["id"]["test"][:1]
        chosen = [*test, *(t for t in ("aeslc_10templates",) if t not in test)]
        for i, task in enumerate(chosen):
            for split, n in (("train", 6), ("validation", 2)):
                path = workdir / flan["path"].replace("{task}", task).replace("_train", f"_{split}")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(flan_records(n, seed=10 * i + n)))
        cfg["prediction"]["splits"]["id"]["test"] = test
    keep = {"oasst1", "lima", "science", "dolly", "flan"}  # an exact and a glob filter; Dolly's column; FLAN's glob
    if any(m["finetune"].get("processes", 1) > 1 for m in cfg["models"].values()):
        keep = {"oasst1", "flan"}  # FSDP's fine-tunes are what this config adds: the task formats are olmo-1b's
    cfg["tasks"] = {k: v for k, v in cfg["tasks"].items() if k in keep}
    categories = {t["category"] for t in cfg["tasks"].values()}
    cfg["prediction"]["splits"] = {name: split for name, split in cfg["prediction"]["splits"].items()
                                   if split.get("test_category") in (None, *categories)}
    for split in cfg["prediction"]["splits"].values():
        if split.get("test"):
            split["test"] = [t for t in split["test"] if t in cfg["tasks"] or t.endswith("_10templates")] or ["lima"]
    cfg["shard_size"] = 24  # one shard of the 24 examples: several shards are the tiny run's to show
    cfg["prediction"].update(k=4, seeds=2, budget=3)
    cfg["prediction"]["probe_evaluation"] = {"ks": [2, 4], "draws": 2}
    mitigation = cfg.get("mitigation") or {"arms": {}}
    if "heldout" in mitigation:
        mitigation["heldout"] = 4
    predicted = sorted((arm.get("method") != "mf", name) for name, arm in mitigation["arms"].items()
                       if arm.get("replay") == "predicted")
    for _, name in predicted[1:]:  # one predicted arm (mf where there is one): the others differ by method alone
        del mitigation["arms"][name]
    for arm in mitigation["arms"].values():
        if "probes" in arm:
            arm["probes"] = 3
        if arm.get("ratio"):
            arm["ratio"] = 0.5
    for model in cfg["models"].values():
        model["finetune"].update(steps=3, batch_size=2, grad_accum=1, lr=1e-3, warmup_steps=1, max_length=48,
                                 gradient_checkpointing=False)
        if model["finetune"].get("processes", 1) > 1:  # FSDP rehearsed by two gloo processes on the CPU
            model["finetune"]["processes"] = 2
        model["score"]["backend"] = "torch"  # vLLM runs in its own environment (tests/vllm_cpu)
        if model["score"].get("cells", 1) < 1:  # a fractional map of a few rows: every example under two of them
            model["score"]["cells"] = 0.9
        model["score"].update(token_budget=512, max_length=48)
        model["correlations"] = {"dim": 16, "max_task_examples": 4, "max_length": 48, "batch_size": 8,
                                 "device": "cpu"}
        model["resources"] = {stage: {"gpu": 0, "mem_mb": 1000, "runtime": 10, "threads": 1}
                              for stage in ("base", "finetune", "score", "semantic", "gradient", "analysis")}


# --- the post-training map: public checkpoints as stand-ins, the benchmarks as local files ------------------

MAP_STANDINS = {  # hub id -> (architecture, chat template, vocabulary size): chat templates only on post-trained
    "allenai/OLMo-2-0425-1B": ("olmo2", None, 400), "allenai/OLMo-2-0425-1B-SFT": ("olmo2", "tulu", 400),
    "allenai/OLMo-2-0425-1B-DPO": ("olmo2", "tulu", 400), "allenai/OLMo-2-0425-1B-Instruct": ("olmo2", "tulu", 400),
    "Qwen/Qwen2.5-3B": ("llama", None, 400), "Qwen/Qwen2.5-3B-Instruct": ("llama", "tulu", 400),
    "Qwen/Qwen2.5-Coder-3B": ("llama", None, 400), "Qwen/Qwen2.5-7B": ("llama", None, 400),
    "Qwen/Qwen2.5-7B-Instruct": ("llama", "tulu", 400), "Qwen/Qwen2.5-Math-7B": ("llama", None, 400),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": ("llama", "tulu", 300),  # another tokenizer
}


def benchmark_rows(dataset: str, n: int) -> list[dict]:
    """Rows shaped as the hub benchmark's own (MMLU's subject and answer index, ARC's choices struct and
    answerKey, GSM8K's worked solution, BBH's input and target)."""
    texts = sentences(n, seed=len(dataset))
    if dataset == "cais/mmlu":
        subjects = ["high_school_mathematics", "college_physics", "world_religions", "marketing"]
        return [{"question": t, "subject": subjects[i % 4], "choices": ["red", "green", "blue", "north"],
                 "answer": i % 4} for i, t in enumerate(texts)]
    if dataset == "allenai/ai2_arc":
        return [{"question": t, "choices": {"text": ["yes", "no", "maybe"], "label": ["A", "B", "C"]},
                 "answerKey": "ABC"[i % 3]} for i, t in enumerate(texts)]
    if dataset == "openai/gsm8k":
        return [{"question": t, "answer": f"{i} + 3 = {i + 3}\n#### {i + 3}"} for i, t in enumerate(texts)]
    return [{"input": f"not ( True ) and {t.split()[0]}", "target": "True" if i % 2 else "False"}
            for i, t in enumerate(texts)]


def map_example(workdir: Path, per_part: int = 6, width: int = 32) -> Path:
    """config/examples/post-training-map.yaml in miniature: every hub checkpoint a cached stand-in, every
    benchmark part a local jsonl in the hub dataset's shape, CPU sizes, torch sampling with 2 seeds."""
    from standins import TULU_TEMPLATE

    repo = Path(__file__).resolve().parents[1]
    cfg = yaml.safe_load((repo / "config/examples/post-training-map.yaml").read_text())
    for hub_id, (architecture, template, vocab) in MAP_STANDINS.items():  # 384 positions: five-shot prompts whole
        cache_standin(workdir / "hub", hub_id, architecture, TULU_TEMPLATE if template else None,
                      seed=len(hub_id), vocab_size=vocab, max_positions=384, width=width)
    for part in cfg["upstream"]["benchmarks"]["parts"]:
        local = workdir / "resources/hf" / f"{part['dataset'].replace('/', '--')}-{part['name']}.jsonl"
        write_jsonl(local, benchmark_rows(part["dataset"], per_part))
        part.update(dataset="json", data_files=str(local), split="train")
        del part["name"]  # a builder dataset has no configurations
    cfg["shard_size"] = 16
    # random stand-ins never write True or False, and a pattern matching none of a source's answers is an
    # error by design (tests/unit/test_sampled.py): the miniature reads BBH's answers as plain text instead
    cfg["upstream"]["benchmarks"]["answers"]["sources"]["bbh_boolean_expressions"] = {"extract": "exact"}
    for model in cfg["models"].values():  # the example's answers (32,768 new tokens at most, no stop string): each
        # runs until the stand-in's context is full or it writes EOS
        model["score"] = {"backend": "torch", "token_budget": 4096, "max_length": 160,
                          "correctness": {**model["score"]["correctness"], "seeds": 2}}
        model["resources"] = {stage: {"gpu": 0, "mem_mb": 1000, "runtime": 10, "threads": 1}
                              for stage in ("base", "finetune", "score", "semantic", "gradient", "analysis")}
    out = workdir / "config" / "post-training-map-mini.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out
