"""Workstation GPUs: concurrent jobs claim distinct devices by lock file (fake device counts on CPU)."""

import json
import os
import subprocess
import sys
import time

import pytest

from forgetmap.devices import claim_gpus
from forgetmap.errors import ForgetmapError

JOB = """
import json, os, sys, time
from forgetmap.devices import claim_gpus
start = time.monotonic()
claim = claim_gpus(int(sys.argv[1]), poll_s=0.05)
waited = time.monotonic() - start
print(json.dumps({"visible": os.environ["CUDA_VISIBLE_DEVICES"], "waited": waited}), flush=True)
time.sleep(float(sys.argv[2]))
"""


def _jobs(tmp_path, specs, count=4, visible=None):
    env = {**os.environ, "FORGETMAP_GPU_COUNT": str(count), "FORGETMAP_GPU_LOCK_DIR": str(tmp_path)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    procs = []
    for gpus, hold, delay in specs:
        time.sleep(delay)
        procs.append(subprocess.Popen([sys.executable, "-c", JOB, str(gpus), str(hold)], env=env,
                                      stdout=subprocess.PIPE, text=True))
    return [json.loads(p.communicate(timeout=60)[0]) for p in procs]


def test_concurrent_jobs_never_share_a_device(tmp_path):
    out = _jobs(tmp_path, [(1, 1.5, 0.0)] * 3 + [(1, 1.5, 0.0)])
    assert sorted(o["visible"] for o in out) == ["0", "1", "2", "3"]


def test_a_job_waits_for_a_free_device_and_a_multi_gpu_job_takes_several(tmp_path):
    # two 1-GPU jobs hold devices 0 and 1 for 2 s; a 2-GPU job gets 2,3 at once; a third 1-GPU job waits
    out = _jobs(tmp_path, [(1, 2.0, 0.0), (1, 2.0, 0.0), (2, 2.0, 0.3), (1, 0.0, 0.3)])
    assert {out[0]["visible"], out[1]["visible"]} == {"0", "1"}
    assert out[2]["visible"] == "2,3" and out[2]["waited"] < 1.0
    assert out[3]["visible"] in {"0", "1", "2", "3"} and out[3]["waited"] > 0.8


def test_devices_chosen_by_the_scheduler_stand(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    monkeypatch.setenv("FORGETMAP_GPU_COUNT", "8")
    claim_gpus(1)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    with pytest.raises(ForgetmapError, match="needs 2 GPU"):
        claim_gpus(2)


def test_more_gpus_than_the_machine_has_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("FORGETMAP_GPU_COUNT", "1")
    with pytest.raises(ForgetmapError, match="needs 2 GPU.*has 1"):
        claim_gpus(2)


def test_jobs_inside_a_preset_device_list_share_it_without_colliding(tmp_path):
    # an `srun --gpus=4` shell: CUDA_VISIBLE_DEVICES=4,5,6,7 is set, and the local jobs split those four
    out = _jobs(tmp_path, [(1, 1.5, 0.0)] * 4, count=8, visible="4,5,6,7")
    assert sorted(o["visible"] for o in out) == ["4", "5", "6", "7"]


def test_a_job_without_a_gpu_resource_sees_no_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    claim_gpus(0)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    from forgetmap.models import pick_device

    assert pick_device("auto").type == "cpu"
    with pytest.raises(ForgetmapError, match="no GPU is visible to this job"):
        pick_device("cuda")


def test_the_gpu_count_is_what_this_process_may_see(monkeypatch):
    """Preflight compares a rule's GPUs with the devices the run may use: CUDA_VISIBLE_DEVICES where it is
    set (a SLURM allocation, a user's choice), not every GPU `nvidia-smi -L` lists."""
    from forgetmap.devices import device_count

    monkeypatch.delenv("FORGETMAP_GPU_COUNT", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert device_count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert device_count() == 0
