"""User data is validated on read: errors name the file, the row and the column."""

import pandas as pd
import pytest

from forgetmap.data import tasks as fm_tasks
from forgetmap.data import upstream as fm_upstream
from forgetmap.errors import DataError


def corpus_frame():
    return pd.DataFrame({
        "example_id": ["a", "b", "c"], "source": ["web", "web", "chat"], "kind": ["lm", "lm", "chat"],
        "text": ["one two", "three four", None], "prompt": [None, None, "hi?"], "response": [None, None, "hello"]})


def write(frame, path):
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_json(path, orient="records", lines=True)
    return str(path)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_valid_corpus_reads_in_contract_order(tmp_path, suffix):
    path = write(corpus_frame(), tmp_path / f"up{suffix}")
    frame = fm_upstream.read_corpus({"format": suffix[1:], "path": path})
    assert list(frame.columns[:6]) == fm_upstream.COLUMNS
    assert fm_upstream.example_ids({"format": suffix[1:], "path": path}) == ["a", "b", "c"]


@pytest.mark.parametrize("mutate, expected", [
    (lambda f: f.drop(columns=["source"]), "missing column(s) 'source'"),
    (lambda f: f.assign(example_id=["a", "b", "a"]), "row 2, column 'example_id': duplicate id 'a' (first at row 0)"),
    (lambda f: f.assign(text=["one", "  ", None]), "row 1, column 'text': empty or missing text"),
    (lambda f: f.assign(kind=["lm", "code", "chat"]), "row 1, column 'kind': 'code' is not one of lm, chat"),
    (lambda f: f.assign(response=[None, None, ""]), "row 2, column 'response'"),
])
def test_bad_corpus_names_file_row_and_column(tmp_path, mutate, expected):
    path = write(mutate(corpus_frame()), tmp_path / "up.parquet")
    with pytest.raises(DataError) as err:
        fm_upstream.read_corpus({"format": "parquet", "path": path})
    assert path in str(err.value) and expected in str(err.value)


def test_duplicate_ids_fail_when_the_workflow_is_planned(tmp_path):
    path = write(corpus_frame().assign(example_id=["a", "a", "c"]), tmp_path / "up.parquet")
    with pytest.raises(DataError, match="row 1, column 'example_id': duplicate id 'a'"):
        fm_upstream.example_ids({"format": "parquet", "path": path})


def test_appending_examples_keeps_earlier_shards():
    ids = [f"x{i}" for i in range(25)]
    before, after = fm_upstream.shard_plan(ids, 10), fm_upstream.shard_plan(ids + ["y1", "y2", "y3", "y4", "y5", "y6"], 10)
    assert [s["count"] for s in before] == [10, 10, 5] and [s["count"] for s in after] == [10, 10, 10, 1]
    assert before[:2] == after[:2] and before[2]["digest"] != after[2]["digest"]


def test_a_changed_text_under_the_same_id_changes_exactly_its_shards_digest(tmp_path):
    frame = pd.DataFrame({"example_id": [f"d{i}" for i in range(25)], "source": "web", "kind": "lm",
                          "text": [f"text {i}" for i in range(25)]})
    spec = {"format": "parquet", "path": write(frame, tmp_path / "up.parquet")}
    before = fm_upstream.shard_plan(fm_upstream.example_ids(spec), 10, spec)
    frame.loc[13, "text"] = "text 13, edited"
    write(frame, tmp_path / "up.parquet")
    after = fm_upstream.shard_plan(fm_upstream.example_ids(spec), 10, spec)
    assert [b["digest"] == a["digest"] for b, a in zip(before, after)] == [True, False, True]


def test_an_empty_corpus_is_refused_when_the_workflow_is_planned(tmp_path):
    path = write(corpus_frame().iloc[:0], tmp_path / "up.parquet")
    spec = {"format": "parquet", "path": path}
    with pytest.raises(DataError, match=f"{path}: no examples"):
        fm_upstream.shard_plan(fm_upstream.example_ids(spec), 10, spec)


def test_a_truncated_jsonl_line_is_named_by_its_line_number(tmp_path):
    path = tmp_path / "up.jsonl"
    write(corpus_frame(), path)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2] + [lines[2][:17]]) + "\n")
    with pytest.raises(DataError, match=r"up.jsonl: line 3: not a JSON object"):
        fm_upstream.read_corpus({"format": "jsonl", "path": str(path)})


def test_demo_shard_is_the_slice_of_the_corpus(tmp_path):
    out = tmp_path / "shard.parquet"
    assert fm_upstream.write_shard({"format": "demo", "seed": 1234}, 14, 7, str(out)) == 7
    shard = pd.read_parquet(out)
    assert shard["example_id"].tolist() == [f"{d}-{i:06d}" for i, d in zip(
        range(14, 21), ["facts", "arith", "words", "code", "story", "dialog", "quiz"])]
    quiz = shard.iloc[6]
    assert quiz["answer"] == quiz["response"] and quiz["kind"] == "chat"
    assert quiz["choices"] is None or quiz["answer"] in list(quiz["choices"])


def task_spec(path, **extra):
    return {"category": "c", "path": str(path), "columns": {}, "validation_path": None,
            "validation_fraction": 0.25, "n_examples": 10, **extra}


def test_task_file_with_renamed_columns_is_split_deterministically(tmp_path):
    path = tmp_path / "flan.jsonl"
    pd.DataFrame({"inputs": [f"q{i}" for i in range(8)], "targets": [f"a{i}" for i in range(8)]}).to_json(
        path, orient="records", lines=True)
    spec = task_spec(path, columns={"prompt": "inputs", "response": "targets"})
    frame = fm_tasks.read_task("t", spec, seed=0, demo_seed=0)
    assert list(frame.columns) == ["prompt", "response", "split"]
    assert (frame["split"] == "validation").sum() == 2
    assert frame.equals(fm_tasks.read_task("t", spec, seed=0, demo_seed=0))


@pytest.mark.parametrize("frame, expected", [
    (pd.DataFrame({"prompt": ["a"], "answer": ["b"]}), "missing column(s) 'response'"),
    (pd.DataFrame({"prompt": ["a", "b"], "response": ["x", ""]}), "row 1, column 'response': empty"),
    (pd.DataFrame({"prompt": ["a"], "response": ["x"], "split": ["dev"]}), "row 0, column 'split': 'dev'"),
])
def test_bad_task_file_names_file_row_and_column(tmp_path, frame, expected):
    path = tmp_path / "task.parquet"
    frame.to_parquet(path)
    with pytest.raises(DataError) as err:
        fm_tasks.read_task("t", task_spec(path), seed=0, demo_seed=0)
    assert str(path) in str(err.value) and expected in str(err.value)


def test_missing_task_file_is_named(tmp_path):
    with pytest.raises(DataError, match="nowhere.jsonl: file not found"):
        fm_tasks.read_task("t", task_spec(tmp_path / "nowhere.jsonl"), seed=0, demo_seed=0)


def test_a_directory_of_upstream_shards_reads_in_corpus_order_and_refuses_two_definitions_of_one(tmp_path):
    """The workflow names a shard by its definition (shard-K.KEY.parquet): a directory where two configs defined the
    corpus otherwise holds two of a shard, and reading it as the map's upstream would mix them."""
    from forgetmap.errors import DataError
    from forgetmap.monitor.map import upstream_files

    for name in ("shard-10.aaaa0000.parquet", "shard-2.bbbb1111.parquet", "shard-0.parquet", "notes.parquet"):
        (tmp_path / name).write_bytes(b"")
    assert [p.split("/")[-1] for p in upstream_files(tmp_path)] == [
        "shard-0.parquet", "shard-2.bbbb1111.parquet", "shard-10.aaaa0000.parquet"]
    (tmp_path / "shard-2.cccc2222.parquet").write_bytes(b"")
    with pytest.raises(DataError, match=r"shard-2\.bbbb1111\.parquet, shard-2\.cccc2222\.parquet are the same shard"):
        upstream_files(tmp_path)
