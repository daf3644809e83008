"""Shared test helpers: a tiny tokenizer and model, and running the workflow in a scratch copy."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_FILES = ("Snakefile", "rules", "config", "profiles", "envs", "workflow/report")


def command(name: str) -> str:
    """A console script of the environment running the tests: the one beside its interpreter (a virtualenv's,
    used without activating it), else the first on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def data_file(workdir: Path, corpus_or_task: str, shard: int | None = None) -> Path:
    """The one generated data file of a corpus shard (`shard` given) or a task under `workdir/results/data`, whose
    name ends in its definition's key (forgetmap.plan.paths)."""
    pattern = (f"upstream/{corpus_or_task}/shard-{shard}.*.parquet" if shard is not None
               else f"tasks/{corpus_or_task}.*.parquet")
    found = sorted((Path(workdir) / "results/data").glob(pattern))
    assert len(found) == 1, (pattern, found)
    return found[0]


def tiny_tokenizer():
    from forgetmap.base import pretraining_texts
    from forgetmap.data import demo
    from forgetmap.models import train_demo_tokenizer

    return train_demo_tokenizer(pretraining_texts(demo.upstream_corpus(120, 1234)), 300)


def tiny_model(tokenizer, seed: int = 0):
    from forgetmap.models import build_demo_model

    arch = {"hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 2, "max_position_embeddings": 128}
    return build_demo_model(tokenizer, arch, seed).eval()


def tiny_config() -> dict:
    return yaml.safe_load((REPO / "config/test/config.yaml").read_text())


def make_workdir(path: Path, config: dict | None = None) -> Path:
    """A scratch copy of the workflow with `config` as config/config.yaml."""
    path.mkdir(parents=True, exist_ok=True)
    for item in WORKFLOW_FILES:
        src, dst = REPO / item, path / item
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dst)
    write_config(path, config if config is not None else tiny_config())
    return path


def write_config(workdir: Path, config: dict) -> None:
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def clone_workdir(src: Path, dst: Path) -> Path:
    """Copy a finished run, keeping modification times (what Snakemake compares)."""
    shutil.copytree(src, dst, copy_function=shutil.copy2, symlinks=True)
    return dst


def cores() -> int:
    """The cores a test's Snakemake run takes: the machine's share of each test process (pytest-xdist's workers
    run side by side; two runs of --cores 2 on 2 cores put 4 single-threaded jobs, or 2-thread torch jobs, on 2
    cores), at most 2."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, min(2, (os.cpu_count() or 1) // workers))


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: int = 900,
              env: dict | None = None, ncores: int | None = None, runner: tuple = ("-m", "snakemake")
              ) -> subprocess.CompletedProcess:
    """`snakemake` in `workdir` on `ncores` cores (None: this test process's share, `cores()`); a variable that
    `env` gives as None is removed; `runner`: what python runs (a script that starts Snakemake itself)."""
    # rules call `forgetmap`: take it from the environment running the tests
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", **(env or {})}
    env = {k: v for k, v in env.items() if v is not None}
    cmd = [sys.executable, *map(str, runner), "--cores", str(ncores or cores()), *args]
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n"
                             f"{proc.stderr[-6000:]}")
    return proc


def planned_jobs(workdir: Path, *args: str, env: dict | None = None) -> list[tuple[str, dict]]:
    """(rule, wildcards) of every job a dry run would run."""
    return [(rule, wildcards) for rule, wildcards, _ in planned_with_resources(workdir, *args, env=env)]


def planned_with_resources(workdir: Path, *args: str, env: dict | None = None) -> list[tuple[str, dict, dict]]:
    """(rule, wildcards, resources as the dry run prints them) of every job a dry run would run."""
    proc = snakemake(workdir, "--dry-run", *args, env=env)
    return jobs_printed(proc.stdout + proc.stderr)


def jobs_printed(text: str) -> list[tuple[str, dict, dict]]:
    """(rule, wildcards, resources) of every job block in a dry run's output."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", text):
        head = re.match(r"(?:local)?rule (\w+):", block)
        if not head:
            continue
        found = {}
        for field in ("wildcards", "resources"):
            line = re.search(rf"^\s+{field}: (.*)$", block, re.M)
            found[field] = dict(kv.split("=", 1) for kv in line.group(1).split(", ")) if line else {}
        jobs.append((head.group(1), found["wildcards"], found["resources"]))
    return jobs


def page_data(page: str | Path) -> dict:
    """The data an explorer page carries (its JSON script), from the page's text or its file."""
    import json

    text = page.read_text() if isinstance(page, Path) else page
    return json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S).group(1))


def by_rule(jobs) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rule, _ in jobs:
        counts[rule] = counts.get(rule, 0) + 1
    return counts


def edited(config: dict, fn) -> dict:
    out = copy.deepcopy(config)
    fn(out)
    return out


def released_binary_fixture(directory: Path, seed: int = 0) -> np.ndarray:
    """The exact-match setup's release: a 0/1 Y over base-correct items (low-rank logits), its .meta
    and a binary split pickle, as `train_em_fgt_base_correct.npy` and `fpd-split-flan-bin-*.pkl`."""
    import json
    import pickle

    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(6, 2)) @ rng.normal(size=(2, 80)) * 2 - 1
    y = (rng.uniform(size=logits.shape) < 1 / (1 + np.exp(-logits))).astype(np.float64)
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "train_em_fgt_base_correct.npy", y)
    meta = {"mmlu": {"start": 0, "stop": 4, "tasks": ["anatomy", "astronomy", "law", "virology"]},
            "dolly": {"start": 4, "stop": 6, "tasks": ["brainstorm", "summarize"]}}
    (directory / "train_em_fgt_base_correct.npy.meta").write_text(json.dumps(meta))
    split = {"train_mat": y[:3], "test_mat": y[3:4], "train_ocl_idxs": [0, 1, 2], "test_ocl_idxs": [0],
             "train_ocl_task_info": [{"cat": "mmlu", "name": n, "split": "train"}
                                     for n in ("anatomy", "astronomy", "law")],
             "test_ocl_task_info": [{"cat": "mmlu", "name": "virology", "split": "train"}]}
    with open(directory / "fpd-split-flan-bin-id.pkl", "wb") as handle:
        pickle.dump(split, handle)
    return y


def released_fixture(directory: Path, seed: int = 0) -> dict:
    """Files in exactly the authors' released formats: Z .npy + .meta, base log-probs, a split pickle."""
    import json
    import pickle

    rng = np.random.default_rng(seed)
    z = (rng.normal(size=(5, 3)) @ rng.normal(size=(3, 40)) * 0.1 + 0.2).astype(np.float64)
    z[:, 7] = np.nan  # an empty-span example: NaN in every row, as in the "-full" files
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "ftd-ppl-inc-full.npy", z)
    meta = {"flan": {"start": 0, "stop": 3, "tasks": ["aeslc", "cb", "wsc"]},
            "tulu": {"start": 3, "stop": 5, "tasks": ["lima", "oasst1"]}}
    (directory / "ftd-ppl-inc-full.npy.meta").write_text(json.dumps(meta))
    base = -rng.uniform(1.5, 3.0, size=40)
    base[7] = np.nan
    np.save(directory / "olmo_base_ppl.npy", base)
    keep = ~np.isnan(z[0])
    split = {"train_mat": z[:3][:, keep], "test_mat": z[3:][:, keep], "train_ocl_idxs": [0, 1, 2],
             "test_ocl_idxs": [0, 1],
             "train_ocl_task_info": [{"cat": "flan", "name": n, "split": "train"} for n in ("aeslc", "cb", "wsc")],
             "test_ocl_task_info": [{"cat": "tulu", "name": n, "split": "train"} for n in ("lima", "oasst1")],
             "pt_task_info": {"cat": "dolma", "names": None, "split": "train"}}
    with open(directory / "fpd-split-ood-tulu.pkl", "wb") as handle:
        pickle.dump(split, handle)
    return {"z": z, "base": base, "meta": meta, "split": split}


# a record of forgetmap's own logging (the jobs' format): its WARNING lines are messages about the data
OWN_RECORD = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ forgetmap(\.\w+)* [A-Z]+ ")


def library_warnings(workdir: Path) -> list[str]:
    """Every line of the run's job logs that mentions a warning and is not forgetmap's own record: a
    Python warning (`...: FutureWarning: ...`) or a library logger's, as a new release adds them."""
    found = []
    for log in sorted((workdir / "results/logs").rglob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if re.search("warn", line, re.IGNORECASE) and not OWN_RECORD.match(line):
                found.append(f"{log.relative_to(workdir)}: {line}")
    return found


class IdTokenizer:
    """What generation needs of a tokenizer, for token ids drawn at random: its pad and EOS ids, and a
    decoding that writes the ids themselves."""

    def __init__(self, pad_token_id: int, eos_token_id: int | None):
        self.pad_token_id, self.eos_token_id = pad_token_id, eos_token_id

    def batch_decode(self, sequences, skip_special_tokens: bool = True) -> list[str]:
        return [" ".join(str(t) for t in ids) for ids in sequences]


def greedy_tokens(model, contexts, pad_id: int, eos_id: int | None, max_new_tokens: int, token_budget: int = 4096):
    """Greedy continuations of random token ids through forgetmap.generation, EOS left out."""
    import numpy as np

    from forgetmap.generation import generate_torch

    limits = np.full(len(contexts), max_new_tokens)
    return generate_torch(model, IdTokenizer(pad_id, eos_id), contexts, limits, token_budget=token_budget).tokens


def half_only_attention(name: str) -> str:
    """Register (as `name`) an attention function that refuses fp32 as flash-attention does, after
    transformers' own casting under autocast: a stand-in for flash-attn's kernel on a CPU."""
    import torch
    from transformers import AttentionInterface
    from transformers.integrations.flash_attention import get_target_dtype
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def half_only(module, query, key, value, *args, **kwargs):
        dtype = get_target_dtype(query, module) or query.dtype
        if dtype not in (torch.float16, torch.bfloat16):
            raise RuntimeError("FlashAttention only support fp16 and bf16 data type")
        return sdpa_attention_forward(module, query.to(dtype), key.to(dtype), value.to(dtype), *args, **kwargs)

    AttentionInterface.register(name, half_only)
    return name


def refit_strata(train, known, top: float = 0.1) -> np.ndarray:
    """The audit's strata recomputed (forgetmap.predict.audit): of the examples that are not probes, the
    round(top · their number) with the largest mean |Z| over the fit rows 1, the others 0, the probes -1."""
    train = np.asarray(train, dtype=np.float64)
    labels = np.zeros(train.shape[1], dtype=int)
    labels[np.asarray(known)] = -1
    others = [i for i in range(train.shape[1]) if labels[i] == 0]
    ranked = sorted(others, key=lambda i: (-np.abs(train[:, i]).mean(), i))
    labels[ranked[:round(top * len(others))]] = 1
    return labels
