"""The shipped example configs, run end to end in miniature: the same files, with tiny stand-ins of
their base models (OLMo, GPTNeoX, OLMo-2) under the configs' own hub ids (OLMo-2 7B's four FSDP processes
as two gloo processes), their data in the formats they expect
(a corpus without items, FLAN json files, Tulu and Dolly as Hugging Face datasets), and only paths, sizes,
steps and a few tasks overridden."""

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from examples import example_config
from forgetmap.matrix import ForgettingMatrix
from helpers import library_warnings, make_workdir, snakemake

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module", params=["olmo-1b", "pythia-1b", "olmo2-7b"])
def finished(request, tmp_path_factory):
    workdir = make_workdir(tmp_path_factory.mktemp(request.param) / "wf")
    config = example_config(workdir, request.param, scale="mini")
    proc = snakemake(workdir, "--configfile", str(config), env={"HF_HUB_CACHE": str(workdir / "hub")})
    (workdir / "run.out").write_text(proc.stdout + proc.stderr)
    return workdir, yaml.safe_load(config.read_text())


def test_the_example_config_builds_every_target_without_a_traceback(finished):
    workdir, cfg = finished
    (model,) = cfg["models"]
    matrix = ForgettingMatrix.read(workdir / f"results/{model}/forgetting.parquet")
    fsdp = cfg["models"][model]["finetune"].get("processes", 1) > 1  # olmo2-7b: its FSDP fine-tunes the point
    assert ({"oasst1"} if fsdp else {"oasst1", "science", "brainstorming", "closed_qa"}) <= set(matrix.tasks)  # hf tasks
    assert np.isfinite(matrix.values).all()
    # the paper-scale examples ship a fractional map (score.cells): completed where not measured, marked
    fraction = cfg["models"][model].get("score", {}).get("cells", 1)
    assert matrix.completed == (fraction < 1) and (fraction == 1 or 0.8 < matrix.measured.mean() < 1)
    for name in ("summary.tsv", "tests.tsv") if cfg.get("mitigation") else ():
        assert (workdir / f"results/{model}/mitigation/{name}").exists()
    if fsdp:  # every fine-tune sharded over two gloo processes
        log = (workdir / f"results/logs/{model}/finetune/oasst1.log").read_text()
        assert "launching 2 FSDP training processes" in log
    assert (workdir / f"results/{model}/prediction/scores.tsv").exists()
    assert "Traceback" not in (workdir / "run.out").read_text() and library_warnings(workdir) == []
    assert not (workdir / f"results/{model}/checkpoints").exists() or not any(
        (workdir / f"results/{model}/checkpoints").iterdir())  # keep_checkpoints: false, as the config says


def test_the_base_scores_are_what_plain_transformers_computes(finished):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    workdir, cfg = finished
    (model,) = cfg["models"]
    snapshot = next((workdir / "hub").glob(f"models--{cfg['models'][model]['base']['path'].replace('/', '--')}"
                                           "/snapshots/*"))
    net = AutoModelForCausalLM.from_pretrained(snapshot).eval()
    tok = AutoTokenizer.from_pretrained(snapshot)
    scores = pd.read_parquet(workdir / f"results/{model}/scores/base/shard-0.parquet")
    corpus = pd.read_parquet(workdir / cfg["upstream"][cfg["models"][model]["upstream"]]["path"])
    for i in (0, 5):
        ids = tok(corpus["text"][i])["input_ids"][:cfg["models"][model]["score"]["max_length"]]
        with torch.no_grad():
            logp = torch.log_softmax(net(input_ids=torch.tensor([ids])).logits[0], -1)
        expected = -np.mean([logp[t - 1, ids[t]].item() for t in range(1, len(ids))])
        assert scores["nll"][i] == pytest.approx(expected, abs=1e-5)
