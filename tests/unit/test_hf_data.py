"""Data where researchers keep it: Hugging Face datasets in the shapes the paper's sources have (Tulu's
`messages`, Dolly's `context` and `category`, MMLU's answer index), read from local files only, and
task families (a glob over FLAN files, a dataset column) that make one task each."""

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest

from forgetmap import config as fm_config
from forgetmap.data import hf
from forgetmap.data.tasks import read_task, write_task
from forgetmap.data.upstream import example_ids, has_items, read_corpus
from forgetmap.errors import ConfigError, DataError

TULU = [
    {"dataset": "oasst1", "id": "o1", "messages": [{"role": "user", "content": "Name a river."},
                                                   {"role": "assistant", "content": "The Nile."},
                                                   {"role": "user", "content": "Another?"},
                                                   {"role": "assistant", "content": "The Amazon."}]},
    {"dataset": "science.qasper", "id": "s1", "messages": [{"role": "system", "content": "Be brief."},
                                                           {"role": "user", "content": "What is DNA?"},
                                                           {"role": "assistant", "content": "A molecule."}]},
    {"dataset": "science.scierc", "id": "s2", "messages": [{"role": "user", "content": "Define RNA."},
                                                           {"role": "assistant", "content": "Also a molecule."}]},
    {"dataset": "lima", "id": "l1", "messages": [{"role": "user", "content": "Hello"},
                                                 {"role": "assistant", "content": "Hi there."}]},
]
DOLLY = [
    {"instruction": "Summarize this.", "context": "Rivers flow downhill.", "response": "Water goes down.",
     "category": "summarization"},
    {"instruction": "Name a colour.", "context": "", "response": "Yellow.", "category": "brainstorming"},
    {"instruction": "Who wrote it?", "context": "The book was written by Ada.", "response": "Ada.",
     "category": "closed_qa"},
    {"instruction": "List two seasons.", "context": "", "response": "Winter, summer.", "category": "brainstorming"},
]
MMLU = [{"question": "2 + 2 =", "choices": ["3", "4", "5", "6"], "answer": 1, "subject": "math"},
        {"question": "Capital of France?", "choices": ["Paris", "Rome", "Oslo", "Bern"], "answer": 0,
         "subject": "geo"}]


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def task_spec(**spec) -> dict:
    """A task entry with the schema's defaults filled, as the plan hands it to prepare-task."""
    raw = {"upstream": {}, "categories": {"c": {"group": "in_domain"}}, "tasks": {"t": {"category": "c", **spec}},
           "models": {"m": {"imported": {"matrix": "unused.npy"}}}}
    return fm_config.with_defaults(fm_config.SCHEMA, raw)["tasks"]["t"]


def test_tulu_messages_give_the_first_turn_or_all_turns_filtered_by_a_glob(tmp_path):
    files = jsonl(tmp_path / "tulu.jsonl", TULU)
    first = read_task("science", task_spec(format="hf", dataset="json", data_files=files, messages="messages",
                                           where={"dataset": "science*"}, validation_fraction=0.0), 0, 0)
    assert first["prompt"].tolist() == ["What is DNA?", "Define RNA."]  # the system turn is not the prompt
    assert first["response"].tolist() == ["A molecule.", "Also a molecule."]
    every = read_task("oasst1", task_spec(format="hf", dataset="json", data_files=files, messages="messages",
                                          turns="all", where={"dataset": "oasst1"}, validation_fraction=0.0), 0, 0)
    assert every["prompt"][0] == "Name a river.\n<|assistant|>\nThe Nile.\n<|user|>\nAnother?"
    assert every["response"][0] == "The Amazon."


def test_a_saved_dataset_directory_reads_like_the_hub(tmp_path):
    import datasets

    datasets.Dataset.from_list(DOLLY).save_to_disk(str(tmp_path / "dolly"))
    frame = read_task("d", task_spec(format="hf", dataset=str(tmp_path / "dolly"), validation_fraction=0.25,
                                     columns={"prompt": "instruction", "context": "context"}), 0, 0)
    assert frame["prompt"][0] == "Context: Rivers flow downhill.\n\nSummarize this."  # Dolly's context folded in
    assert frame["prompt"][1] == "Name a colour."  # no context: the instruction alone
    assert (frame["split"] == "validation").sum() == 1


def test_one_task_per_dolly_category_each_named_by_its_value(tmp_path):
    files = jsonl(tmp_path / "dolly.jsonl", DOLLY)
    raw = {"upstream": {}, "categories": {"dolly": {"group": "out_of_domain"}},
           "tasks": {"dolly": {"category": "dolly", "format": "hf", "dataset": "json", "data_files": files,
                               "each": "category", "columns": {"prompt": "instruction", "context": "context"}}},
           "models": {"m": {"imported": {"matrix": "unused.npy"}}}}
    tasks = fm_config.with_defaults(fm_config.SCHEMA, raw)["tasks"]
    expanded = fm_config.expand_families(tasks)
    assert list(expanded) == ["summarization", "brainstorming", "closed_qa"]
    assert all(spec["category"] == "dolly" and spec["family"] == "dolly" for spec in expanded.values())
    frame = read_task("brainstorming", {**expanded["brainstorming"], "validation_fraction": 0.0}, 0, 0)
    assert frame["response"].tolist() == ["Yellow.", "Winter, summer."]


def test_flan_files_by_glob_make_one_task_each_with_their_validation_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flan").mkdir()
    for task in ("cola_10templates", "rte_10templates"):
        for split in ("train", "validation"):
            (tmp_path / "flan" / f"{task}_{split}.json").write_text(json.dumps([{"inputs": "q", "targets": "a"}]))
    tasks = {"flan": task_spec(path="flan/{task}_train.json", validation_path="flan/{task}_validation.json",
                               columns={"prompt": "inputs", "response": "targets"})}
    expanded = fm_config.expand_families(tasks)
    assert list(expanded) == ["cola_10templates", "rte_10templates"]
    assert expanded["rte_10templates"]["validation_path"] == "flan/rte_10templates_validation.json"
    with pytest.raises(ConfigError, match=r"tasks\.flan\.path: no file matches"):
        fm_config.expand_families({"flan": task_spec(path="nothing/{task}.json")})
    with pytest.raises(ConfigError, match="defined twice"):
        fm_config.expand_families({**expanded, "flan": tasks["flan"]})


def test_mmlu_items_become_a_corpus_with_their_answer_texts(tmp_path):
    files = jsonl(tmp_path / "mmlu.jsonl", MMLU)
    spec = {"format": "hf", "dataset": "json", "data_files": files, "split": "train", "kind": "chat",
            "columns": {"prompt": "{question}\nAnswer:", "source": "subject"}}
    spec = {**fm_config.with_defaults(fm_config.schema.CORPUS, spec), "seed": 0}
    corpus = read_corpus(spec)
    assert corpus["answer"].tolist() == ["4", "Paris"] and corpus["prompt"][1] == "Capital of France?\nAnswer:"
    assert corpus["response"].tolist() == ["4", "Paris"] and corpus["kind"].tolist() == ["chat", "chat"]
    assert corpus["source"].tolist() == ["math", "geo"] and has_items(spec)
    assert example_ids(spec) == ["json-0", "json-1"]


def test_prepare_task_records_what_it_read(tmp_path):
    files = jsonl(tmp_path / "tulu.jsonl", TULU)
    spec = task_spec(format="hf", dataset="json", data_files=files, messages="messages", where={"dataset": "lima"},
                     validation_fraction=0.0)
    write_task("lima", spec, 0, 0, str(tmp_path / "lima.parquet"))
    meta = json.loads(pq.read_schema(tmp_path / "lima.parquet").metadata[b"forgetmap"])
    assert meta["dataset"] == "json" and meta["fingerprint"] == hf.fingerprint(spec)
    assert pd.read_parquet(tmp_path / "lima.parquet")["prompt"].tolist() == ["Hello"]


def test_bad_dataset_settings_name_the_column(tmp_path):
    files = jsonl(tmp_path / "dolly.jsonl", DOLLY)
    with pytest.raises(DataError, match="column 'prompt_text' .* not found; columns: instruction"):
        read_task("d", task_spec(format="hf", dataset="json", data_files=files,
                                 columns={"prompt": "prompt_text"}), 0, 0)
    with pytest.raises(DataError, match="no rows match the filter"):
        read_task("d", task_spec(format="hf", dataset="json", data_files=files, where={"category": "poetry"},
                                 columns={"prompt": "instruction"}), 0, 0)
    with pytest.raises(DataError, match="cannot be loaded"):
        read_task("d", task_spec(format="hf", dataset=str(tmp_path / "missing")), 0, 0)


@pytest.mark.parametrize("bad, message", [
    ({"columns": {"prompt": "prompt_text"}}, r"column 'prompt_text' \(for 'prompt'\) not found; columns: instruction"),
    ({"columns": {"prompt": "instruction"}, "where": {"category": "poetry"}}, "no rows match the filter"),
    ({"columns": {"prompt": "instruction"}, "where": {"genre": "poetry"}}, "filter column 'genre' not found"),
    ({"columns": {"prompt": "{instruction} {hint}"}}, r"names column\(s\) hint, not found"),
    ({}, "no column gives 'prompt'"),
])
def test_a_dataset_task_whose_columns_or_filter_cannot_serve_fails_at_planning_naming_the_key(tmp_path, bad,
                                                                                                message):
    """Planning already loads the dataset (its fingerprint is part of the plan): its shape is checked
    there, before any job, not in the prepare-task job."""
    from forgetmap.plan import Plan
    from helpers import tiny_config

    config = tiny_config()
    config["tasks"]["dolly_qa"] = {"category": next(iter(config["categories"])), "format": "hf", "dataset": "json",
                                   "data_files": jsonl(tmp_path / "dolly.jsonl", DOLLY), **bad}
    with pytest.raises(ConfigError, match=rf"config key tasks\.dolly_qa: dataset json, split train: .*{message}"):
        Plan(config)
    config["tasks"]["dolly_qa"].update(columns={"prompt": "instruction"}, where={"category": "brainstorming"})
    assert "dolly_qa" in Plan(config).tasks["tiny"]
