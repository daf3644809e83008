"""Importing the authors' released statistics reproduces their numbers exactly."""

import json
import pickle

import numpy as np
import pytest

from forgetmap.cli import main
from forgetmap.errors import DataError
from forgetmap.lowrank import drop_missing, r2_by_rank
from forgetmap.matrix import ForgettingMatrix
from forgetmap.released import import_matrix, import_split, released_tasks
from helpers import released_binary_fixture, released_fixture


@pytest.fixture
def released(tmp_path):
    return tmp_path, released_fixture(tmp_path)


def test_matrix_base_and_labels_are_imported_exactly(released):
    path, fx = released
    m = import_matrix(path / "ftd-ppl-inc-full.npy", base_logprobs=path / "olmo_base_ppl.npy", corpus="dolma")
    assert m.tasks == ["aeslc", "cb", "wsc", "lima", "oasst1"] and m.shape == (5, 40)
    assert m.categories == {"aeslc": "flan", "cb": "flan", "wsc": "flan", "lima": "tulu", "oasst1": "tulu"}
    np.testing.assert_array_equal(m.values, fx["z"].astype(np.float32))
    np.testing.assert_array_equal(m.base_nll, (-fx["base"]).astype(np.float32))
    assert m.example_ids[3] == "dolma-000003" and np.isnan(m.values[:, 7]).all()


def test_r2_of_the_import_equals_the_reference_computation(released, tmp_path):
    path, fx = released
    main(["import", "--matrix", str(path / "ftd-ppl-inc-full.npy"), "--out", str(tmp_path / "z.parquet")])
    m = ForgettingMatrix.read(tmp_path / "z.parquet")
    ours = r2_by_rank(drop_missing(m.values, m.tasks).z)
    z = fx["z"][:, ~np.isnan(fx["z"][0])]  # the reference's remove_nan_cols: columns where row 0 is NaN
    u, s, vt = np.linalg.svd(z, full_matrices=True)
    sst = ((z - z.mean()) ** 2).mean()
    reference = [1 - ((z - (u[:, :r] * s[:r]) @ vt[:r]) ** 2).mean() / sst for r in range(1, 6)]
    np.testing.assert_allclose(ours, reference, rtol=1e-5)


def test_split_pickles_become_split_definitions(released, tmp_path):
    path, _ = released
    main(["import-split", "--matrix", str(path / "ftd-ppl-inc-full.npy"), "--name", "ood-tulu",
          "--split", str(path / "fpd-split-ood-tulu.pkl"), "--out", str(tmp_path / "splits/ood-tulu.json")])
    split = json.loads((tmp_path / "splits/ood-tulu.json").read_text())
    assert split["train_tasks"] == ["aeslc", "cb", "wsc"] and split["test_tasks"] == ["lima", "oasst1"]
    assert released_tasks(path / "ftd-ppl-inc-full.npy") == ["aeslc", "cb", "wsc", "lima", "oasst1"]


def test_bad_meta_is_named(released):
    path, fx = released
    bad = dict(fx["meta"], tulu={"start": 3, "stop": 5, "tasks": ["lima"]})
    (path / "ftd-ppl-inc-full.npy.meta").write_text(json.dumps(bad))
    with pytest.raises(DataError, match="category 'tulu' spans rows 3..4 with 1 task names"):
        import_matrix(path / "ftd-ppl-inc-full.npy")


def test_base_of_another_length_is_named(released):
    path, _ = released
    np.save(path / "short.npy", np.zeros(39))
    with pytest.raises(DataError, match="short.npy: 39 base log-probs for a matrix of 40 examples"):
        import_matrix(path / "ftd-ppl-inc-full.npy", base_logprobs=path / "short.npy")


def test_split_with_a_task_in_both_parts_or_unknown_tasks_is_rejected(released):
    path, fx = released
    split = dict(fx["split"], test_ocl_task_info=[{"cat": "flan", "name": "cb"}, {"cat": "tulu", "name": "lima"}])
    with open(path / "bad.pkl", "wb") as handle:
        pickle.dump(split, handle)
    with pytest.raises(DataError, match=r"\['cb'\] are both train and test tasks"):
        import_split(path / "bad.pkl", "bad")
    with pytest.raises(DataError, match="not rows of the imported matrix"):
        import_split(path / "fpd-split-ood-tulu.pkl", "x", known_tasks=["aeslc"])


def test_a_binary_matrix_imports_as_y_and_other_values_are_named(tmp_path):
    y = released_binary_fixture(tmp_path)
    m = import_matrix(tmp_path / "train_em_fgt_base_correct.npy", statistic="forgotten_1to0")
    assert m.statistic == "forgotten_1to0" and m.tasks[:2] == ["anatomy", "astronomy"]
    np.testing.assert_array_equal(m.values, y.astype(np.float32))
    bad = y.copy()
    bad[2, 5] = -1  # a base_em - ft_em file
    np.save(tmp_path / "delta.npy", bad)
    with pytest.raises(DataError, match=r"delta.npy: value -1 at row 2, column 5: a binary matrix holds 0"):
        import_matrix(tmp_path / "delta.npy", tmp_path / "train_em_fgt_base_correct.npy.meta",
                      statistic="forgotten_1to0")


def test_a_released_map_reads_back_whole_through_the_import(released, tmp_path):
    """`forgetmap release` writes the authors' format; `forgetmap import` (what models.NAME.imported runs) reads back
    every value, label and id; a category whose rows are not contiguous cannot be one .meta range and is refused."""
    path, _ = released
    m = import_matrix(path / "ftd-ppl-inc-full.npy", base_logprobs=path / "olmo_base_ppl.npy", corpus="dolma",
                      groups={"flan": "in_domain", "tulu": "out_of_domain"})
    m.example_ids = np.array([f"ex-{j}" for j in range(m.shape[1])])[::-1].copy()
    m.sources = np.array(["web", "code"] * (m.shape[1] // 2))
    m.write(tmp_path / "map.parquet")
    (tmp_path / "ood.json").write_text(json.dumps({"name": "ood", "train_tasks": ["aeslc", "wsc"],
                                                    "test_tasks": ["oasst1"]}))
    main(["release", "--matrix", str(tmp_path / "map.parquet"), "--splits", f"ood={tmp_path / 'ood.json'}",
          "--out", str(tmp_path / "out")])
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["map.npy", "map.npy.meta", "map_base_ppl.npy", "map_example_ids.txt", "map_sources.txt",
                     "map_split_ood.pkl"]
    split = import_split(tmp_path / "out/map_split_ood.pkl", "ood", m.tasks)
    assert (split["train_tasks"], split["test_tasks"]) == (["aeslc", "wsc"], ["oasst1"])
    out = tmp_path / "out"
    main(["import", "--matrix", str(out / "map.npy"), "--base-logprobs", str(out / "map_base_ppl.npy"),
          "--sources", str(out / "map_sources.txt"), "--example-ids", str(out / "map_example_ids.txt"),
          "--groups", json.dumps(m.groups), "--out", str(tmp_path / "back.parquet")])
    back = ForgettingMatrix.read(tmp_path / "back.parquet")
    np.testing.assert_array_equal(back.values, m.values)
    np.testing.assert_array_equal(back.base_nll, m.base_nll)
    assert (back.tasks, back.categories, back.groups) == (m.tasks, m.categories, m.groups)
    assert back.example_ids.tolist() == m.example_ids.tolist() and back.sources.tolist() == m.sources.tolist()
    m.categories["cb"] = "tulu"  # flan, tulu, flan: two ranges
    with pytest.raises(DataError, match="category 'flan'.*not contiguous"):
        from forgetmap.released import release

        release(m, tmp_path / "bad", "map")
    assert not (tmp_path / "bad").exists() or not list((tmp_path / "bad").iterdir())
