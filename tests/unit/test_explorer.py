"""The explorer's data and page (forgetmap.explorer) on a small matrix that is not the demo's."""

import numpy as np
import pandas as pd

from forgetmap.explorer import TEXT_CHARS, build, render
from forgetmap.matrix import ForgettingMatrix
from helpers import page_data

SETTINGS = {"model": "m<1>", "categories": {"a": "x", "b": "x", "c": "y"}, "modes": {}, "top_forgotten": 3,
            "top_improved": 2, "components": 2, "component_tasks": 3, "component_examples": 2, "top_protected": 2,
            "columns": 4}


def small(tmp_path):
    rng = np.random.default_rng(0)
    ids = np.array([f"e{i}" for i in range(12)])
    z = rng.normal(size=(3, 12)).astype(np.float32)
    z[:, 5] = np.nan  # an example without a scored span under every task
    matrix = ForgettingMatrix(z, ["a", "b", "c"], ids, np.array(["s1"] * 6 + ["s2"] * 6),
                              rng.uniform(1, 2, 12).astype(np.float32), {"a": "x", "b": "x", "c": "y"})
    # both kinds of example: plain text (lm, one of them longer than the page carries) and chat
    kinds = ["lm"] * 6 + ["chat"] * 6
    texts = [f"plain text {i}" if k == "lm" else None for i, k in enumerate(kinds)]
    texts[1] = "x" * (TEXT_CHARS + 500)
    prompts = [None if k == "lm" else f"question {i}" for i, k in enumerate(kinds)]
    responses = [None if k == "lm" else f"answer {i}" for i, k in enumerate(kinds)]
    worst = int(np.nanargmax(z[0]))
    if kinds[worst] == "lm":
        texts[worst] = "</script><script>alert(1)</script>"
    else:
        responses[worst] = "</script><script>alert(1)</script>"
    shard = tmp_path / "shard.parquet"
    pd.DataFrame({"example_id": ids, "source": matrix.sources, "kind": kinds, "text": texts, "prompt": prompts,
                  "response": responses}).to_parquet(shard)
    return matrix, [str(shard)], z


def test_each_task_carries_its_most_forgotten_and_improved_examples_with_their_values(tmp_path):
    matrix, shards, z = small(tmp_path)
    data = build(matrix, shards, SETTINGS)
    for t, task in enumerate(matrix.tasks):
        order = np.argsort(-np.nan_to_num(z[t], nan=-np.inf))
        forgotten = data["task_top"][task]["forgotten"]
        assert [e["id"] for e in forgotten] == [f"e{i}" for i in order[:3]]
        assert forgotten[0]["z"] == round(float(z[t, order[0]]), 4)
        assert forgotten[0]["after_nll"] == round(float(matrix.base_nll[order[0]] + z[t, order[0]]), 4)
    example = data["examples"][data["task_top"]["a"]["forgotten"][0]["id"]]
    assert example["z"][0] == data["task_top"]["a"]["forgotten"][0]["z"] and len(example["loadings"]) == 2
    assert "e5" not in {e["id"] for top in data["task_top"].values() for e in top["forgotten"]}
    assert sum(len(row) for row in data["overview"]["values"]) == 3 * len(data["overview"]["columns"])
    assert len(data["overview"]["columns"]) == 4  # two bins per source of 6


def test_the_page_is_one_file_whose_texts_cannot_close_its_script(tmp_path):
    matrix, shards, _ = small(tmp_path)
    page = render(build(matrix, shards, SETTINGS))
    assert "alert(1)</script>" not in page and "<\\/script><script>alert(1)<\\/script>" in page
    assert "<title>forgetmap explorer: m&lt;1&gt;</title>" in page
    data = page_data(page)  # NaN never reaches the page: JSON null instead
    assert data["model"] == "m<1>" and "Plotly" in page and "/*PLOTLY*/" not in page and "{{DATA}}" not in page


def test_every_kind_of_example_carries_its_text_and_the_overview_names_its_sources(tmp_path):
    matrix, shards, _ = small(tmp_path)
    data = build(matrix, shards, {**SETTINGS, "top_forgotten": 12, "top_improved": 12})
    examples = data["examples"]
    assert examples["e0"]["text"] == "plain text 0" and "prompt" not in examples["e0"]  # lm: its text
    assert examples["e7"]["prompt"] == "question 7" and examples["e7"]["response"] == "answer 7"
    assert "text" not in examples["e7"] and "length" not in examples["e7"]
    long = examples["e1"]  # a long text: shortened, with its whole length so the page can say so
    assert len(long["text"]) == TEXT_CHARS + 1 and long["text"].endswith("…") and long["length"] == TEXT_CHARS + 500
    assert data["overview"]["sources"] == [["s1", 0, 1], ["s2", 2, 3]]
