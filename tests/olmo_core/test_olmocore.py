"""The forgetting monitor in OLMo-core's own `Trainer` (OLMo-core 3.0.0 in a virtualenv of its own:
tests/olmocore_env.py), run by tests/olmocore_run.py on the monitor tests' OLMo-2 stand-in loaded into an OLMo-core
`Transformer`: one process (the probes, the audit examples and a quiz's items), then two gloo ranks under OLMo-core's
FSDP2. Every value the callback holds is checked against the transformers path on the same weights (converted back
by OLMo-core's own converter)."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.olmo_core
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def olmo_core_python():
    import olmocore_env
    from cached_env import python_or_skip

    return python_or_skip(olmocore_env, "OLMo-core")


def run(python: Path, root: Path, *launch: str, extra: tuple = ()) -> dict:
    root.mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([str(python), *launch, str(TESTS / "olmocore_run.py"), str(root), *extra], cwd=TESTS,
                          env=env, capture_output=True, text=True, timeout=600)
    name = "fsdp" if extra else "one"
    (root / f"{name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads((root / ("result-fsdp.json" if extra else "result.json")).read_text())


def last_check(work_dir: str) -> tuple[dict, np.ndarray]:
    path = sorted((Path(work_dir) / "forgetmap-monitor").glob("check-*.parquet"))[-1]
    record = json.loads(pq.read_schema(path).metadata[b"forgetmap"])
    return record, np.array(record["probe_values"] + record["audit_values"])


def agrees_with_transformers(root: Path, result: dict, run: str) -> None:
    """The baseline is the map's base NLL (scored through transformers when the map was made), and the last check's
    probe and audit values are transformers' on OLMo-core's final weights, to 1e-5 in fp32."""
    from forgetmap.monitor import ForecastMap

    forecast_map = ForecastMap.read(root / "map.parquet")
    recorded = forecast_map.base_nll[np.concatenate([forecast_map.known, forecast_map.audit])]
    assert np.abs(np.array(result[run]["baseline"]) - recorded).max() < 1e-5
    assert np.abs(np.array(result["transformers"]["baseline"]) - recorded).max() < 1e-5
    _, values = last_check(result[run]["work_dir"])
    assert np.abs(values - np.array(result["transformers"]["change"])).max() < 1e-5


def test_olmo_cores_trainer_runs_the_monitor_stops_at_a_budget_resumes_and_agrees_with_transformers(
        olmo_core_python, tmp_path):
    result = run(olmo_core_python, tmp_path / "one")
    assert len(result["refused"]) == 3 and all(m.startswith("ForgettingMonitor") for m in result["refused"])
    assert "tokenizer" in result["refused"][0] and "every" in result["refused"][1]
    assert "patience" in result["refused"][2]
    assert result["config"] == {"class": "forgetmap.monitor.olmocore.ForgettingMonitorConfig", "same": True,
                                "budget": 0.2}

    budget = result["budget"]  # every check is over a budget of -1 nats: stopped and saved at the first
    assert budget["step"] == 2 and [c["step"] for c in budget["checks"]] == [2]
    assert (tmp_path / "one" / "budget" / "step2").is_dir()
    assert budget["checks"][0]["eval_forget_upper"] > -1.0

    first, resumed = result["first"], result["resumed"]
    assert [c["step"] for c in first["checks"]] == [2, 4]
    assert [c["step"] for c in resumed["checks"]] == [2, 4, 6]  # the step-4 checkpoint held its check
    assert resumed["baseline"] == first["baseline"] and resumed["checks"][:2] == first["checks"]
    trajectory = (Path(resumed["work_dir"]) / "forgetmap-monitor" / "trajectory.tsv").read_text().splitlines()
    assert len(trajectory) == 4
    # OLMo-core's loggers receive the check's scalars as metrics of its step
    for check in first["checks"]:
        logged = first["metrics"][str(check["step"])]
        for name in ("mean", "forecast_mean", "lower", "upper", "probe_mean"):
            assert logged[f"forget/{name}"] == pytest.approx(check[f"eval_forget_{name}"], rel=1e-6)
    record, _ = last_check(resumed["work_dir"])
    assert record["step"] == 6
    assert record["scalars"]["upper"] == pytest.approx(resumed["checks"][-1]["eval_forget_upper"])
    agrees_with_transformers(tmp_path / "one", result, "resumed")
    # the quiz's items through OLMo-core's model: every one right or wrong as transformers decides it, at the
    # baseline (kept by the resume) and at the last check, whose F, BT and accuracy are Harmon's counting
    from forgetmap.correctness.transitions import rates

    hf = result["transformers"]
    assert first["item_baseline"] == resumed["item_baseline"] == hf["items_before"]
    harmon = rates(np.array(hf["items_before"]), np.array(hf["items_after"]), np.array(hf["options"]))
    assert harmon["F"] > 0 and harmon["BT"] > 0  # items turned both ways
    for rate in ("F", "BT", "F_true", "BT_true"):
        assert resumed["checks"][-1][f"eval_forget_items_{rate}"] == pytest.approx(harmon[rate], abs=1e-12)
    assert resumed["checks"][-1]["eval_forget_items_acc"] == pytest.approx(harmon["acc_after"], abs=1e-12)
    assert resumed["metrics"]["6"]["forget/items_F"] == pytest.approx(harmon["F"], rel=1e-6)

    sharded = run(olmo_core_python, tmp_path / "one", "-m", "torch.distributed.run", "--nproc_per_node=2",
                  extra=("--fsdp",))  # the same base, map and token files
    assert [c["step"] for c in sharded["first"]["checks"]] == [2, 4]
    assert sharded["first"]["baseline"] == pytest.approx(first["baseline"], abs=1e-6)
    agrees_with_transformers(tmp_path / "one", sharded, "first")
