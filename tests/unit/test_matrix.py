"""The forgetting matrix: Z = NLL_after - NLL_before, written and read back with its labels."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from forgetmap.errors import DataError
from forgetmap.matrix import ForgettingMatrix, assemble


def write_scores(path, ids, nll):
    pq.write_table(pa.table({"example_id": ids, "nll": pa.array(nll, pa.float32()),
                             "n_tokens": pa.array([3] * len(ids), pa.int32())}), path)
    return str(path)


@pytest.fixture
def runs(tmp_path):
    shards = []
    for k, ids in enumerate([["a", "b"], ["c"]]):
        path = tmp_path / f"shard-{k}.parquet"
        pd.DataFrame({"example_id": ids, "source": ["web"] * len(ids)}).to_parquet(path)
        shards.append(str(path))
    base = [write_scores(tmp_path / "b0.parquet", ["a", "b"], [1.0, 2.0]),
            write_scores(tmp_path / "b1.parquet", ["c"], [3.0])]
    t1 = [write_scores(tmp_path / "t10.parquet", ["a", "b"], [1.5, 1.0]),
          write_scores(tmp_path / "t11.parquet", ["c"], [3.25])]
    t2 = [write_scores(tmp_path / "t20.parquet", ["a", "b"], [1.0, 2.0]),
          write_scores(tmp_path / "t21.parquet", ["c"], [np.nan])]
    return shards, base, {"t1": t1, "t2": t2}


def test_assemble_write_read_roundtrip(tmp_path, runs):
    shards, base, tasks = runs
    m = assemble(shards, base, tasks, {"t1": "math", "t2": "world"}, {"math": "in_domain", "world": "out_of_domain"})
    m.write(tmp_path / "forgetting.parquet")
    back = ForgettingMatrix.read(tmp_path / "forgetting.parquet")
    assert back.tasks == ["t1", "t2"] and back.shape == (2, 3) and back.values.dtype == np.float32
    np.testing.assert_array_equal(back.values[0], np.array([0.5, -1.0, 0.25], np.float32))
    assert back.values[1, 0] == 0 and np.isnan(back.values[1, 2])
    assert back.example_ids.tolist() == ["a", "b", "c"] and back.categories == {"t1": "math", "t2": "world"}
    assert back.groups == {"math": "in_domain", "world": "out_of_domain"}
    frame = pd.read_parquet(tmp_path / "forgetting.parquet")
    assert list(frame.columns) == ["example_id", "source", "base_nll", "t1", "t2"]
    assert frame["t1"].dtype == np.float32


def test_scores_of_other_examples_are_rejected(tmp_path, runs):
    shards, base, tasks = runs
    tasks["t1"][1] = write_scores(tmp_path / "wrong.parquet", ["z"], [1.0])
    with pytest.raises(DataError, match="wrong.parquet: its example ids do not match"):
        assemble(shards, base, tasks, {"t1": "m", "t2": "m"}, {"m": "in_domain"})


def test_reading_something_else_is_a_clear_error(tmp_path):
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "x.parquet")
    with pytest.raises(DataError, match="not a forgetting matrix"):
        ForgettingMatrix.read(tmp_path / "x.parquet")
