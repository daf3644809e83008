"""The forgetting monitor as an Axolotl plugin (Axolotl 0.19.0 in a virtualenv of its own: tests/axolotl_env.py), run
by tests/axolotl_run.py with Axolotl's own `axolotl train` on the monitor tests' OLMo-2 stand-in: a `forgetmap:` block
in the YAML watching the map's probes and audit examples and an lm-eval task's items; refused blocks; a budget's stop
in a resumed run; every value against the same monitor's in a plain transformers `Trainer` on the same weights."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.axolotl
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def axolotl_python():
    import axolotl_env
    from cached_env import python_or_skip

    return python_or_skip(axolotl_env, "Axolotl")


@pytest.fixture(scope="module")
def result(axolotl_python, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("axolotl")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([str(axolotl_python), str(TESTS / "axolotl_run.py"), str(root)], cwd=TESTS, env=env,
                          capture_output=True, text=True, timeout=900)
    (root / "run.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return {**json.loads((root / "result.json").read_text()), "root": root}


def test_a_bad_forgetmap_block_is_refused_by_axolotls_config_loader_naming_the_key(result):
    said = {name: message.splitlines()[1] if message else None for name, message in result["refused"].items()}
    assert said["unknown key"] == "forgetmap.budgett"
    assert said["unknown item key"] == "forgetmap.items.kk"
    assert said["unknown lm_eval key"] == "forgetmap.items.lm_eval.num_fewshots"
    assert said["wrong kind"] == "forgetmap.every" and "valid integer" in result["refused"]["wrong kind"]
    assert said["out of range"] == "forgetmap.patience"
    assert said["no block"] == "forgetmap" and "Field required" in result["refused"]["no block"]
    assert "forgetmap.every: this config evaluates nothing" in result["refused"]["no check"]
    # a map that is not there: refused with the config, before Axolotl prepares the dataset, naming its key
    assert said["no map"] == "forgetmap.map" and "absent.parquet" in result["refused"]["no map"]
    assert said["no item map"] == "forgetmap.items.map" and "absent-items.parquet" in result["refused"]["no item map"]


def test_axolotl_train_runs_the_monitor_logs_its_scalars_stops_at_a_budget_and_resumes(result):
    first, resumed = result["first"], result["resumed"]
    assert [c["step"] for c in first["checks"]] == [2, 4]
    # resumed from step 4: the baseline and the checks so far came back; over a budget of -1 nats at its first
    # check, it saved (checkpoint-6: the resumed run's save_steps is 100) and stopped short of its 8 steps
    assert resumed["baseline"] == first["baseline"] and resumed["item_baseline"] == first["item_baseline"]
    assert resumed["checks"][:2] == first["checks"] and [c["step"] for c in resumed["checks"]] == [2, 4, 6]
    assert result["checkpoints"] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    assert resumed["over"] == 1 and resumed["checks"][-1]["eval_forget_upper"] > -1.0
    out = result["root"] / "out" / "forgetmap-monitor"
    assert len((out / "trajectory.tsv").read_text().splitlines()) == 4
    # Axolotl's TensorBoard logger received every check's scalars (transformers' `eval/` form of `eval_` names)
    for check in resumed["checks"]:
        for name in ("mean", "forecast_mean", "lower", "upper", "probe_mean", "items_F", "items_acc"):
            logged = result["logged"][f"eval/forget_{name}"][str(check["step"])]
            assert logged == pytest.approx(check[f"eval_forget_{name}"], rel=1e-6, abs=1e-7)


def test_the_plugins_values_equal_a_plain_trainers_on_the_same_weights(result):
    """The baseline equals a plain `Trainer`'s monitor on the base, and the last check's probe and audit changes and
    item rates equal what that monitor measures on the weights Axolotl saved at the check (fp32: 1e-5)."""
    from forgetmap.correctness.transitions import rates
    from forgetmap.monitor import ForecastMap

    resumed, base, final = result["resumed"], result["plain_base"], result["plain_final"]
    assert np.abs(np.array(resumed["baseline"]) - np.array(base["baseline"])).max() < 1e-6
    forecast_map = ForecastMap.read(result["root"] / "map.parquet")  # and the map's own record of the base
    recorded = forecast_map.base_nll[np.concatenate([forecast_map.known, forecast_map.audit])]
    assert np.abs(np.array(resumed["baseline"]) - recorded).max() < 1e-5
    path = sorted((result["root"] / "out" / "forgetmap-monitor").glob("check-*.parquet"))[-1]
    record = json.loads(pq.read_schema(path).metadata[b"forgetmap"])
    assert record["step"] == 6
    change = np.array(final["baseline"]) - np.array(base["baseline"])
    assert np.abs(np.array(record["probe_values"] + record["audit_values"]) - change).max() < 1e-5
    assert np.abs(change).max() > 0.05  # the weights moved
    assert resumed["item_baseline"] == base["item_baseline"]
    harmon = rates(np.array(base["item_baseline"]), np.array(final["item_baseline"]), np.array(base["options"]))
    assert harmon["F"] > 0 and harmon["BT"] > 0  # items turned both ways
    for rate in ("F", "BT", "F_true", "BT_true"):
        assert resumed["checks"][-1][f"eval_forget_items_{rate}"] == pytest.approx(harmon[rate], abs=1e-12)
    assert resumed["checks"][-1]["eval_forget_items_acc"] == pytest.approx(harmon["acc_after"], abs=1e-12)
