"""Dry runs: the DAG's shape, config errors before any job, and the paper-scale example configs."""

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from examples import example_config
from helpers import (REPO, by_rule, edited, jobs_printed, make_workdir, planned_jobs, planned_with_resources, snakemake,
                     tiny_config, write_config)

pytestmark = pytest.mark.workflow


def test_every_finetune_and_every_scoring_shard_is_a_job(tmp_path):
    jobs = planned_jobs(make_workdir(tmp_path))
    assert by_rule(jobs) == {"shard_upstream": 2, "prepare_task": 3, "base_model": 1, "finetune": 3,
                             "score": 8, "forgetting_matrix": 1, "lowrank": 1, "lowrank_summary": 1, "cross_task": 1,
                             "semantic_similarity": 1, "gradient_similarity": 1, "split_definition": 2,
                             "predict": 18, "prediction_scores": 1, "probe_evaluation": 2, "heldout_set": 1,
                             "token_losses": 1, "replay_selection": 4, "arm_run": 7, "plain_scores": 1,
                             "mitigation_summary": 1, "transitions": 1, "lowrank_binary": 1, "predict_binary": 12,
                             "binary_prediction_scores": 1, "explorer": 1, "all": 1}
    runs = {(w["run"], w["shard"]) for r, w in jobs if r == "score"}
    assert runs == {(run, k) for run in ("base", "city_qa", "mod10_add", "hex_copy") for k in ("0", "1")}


def test_the_default_demo_carries_a_small_arena_in_one_job_per_arm_and_task(tmp_path):
    """`snakemake --cores 2` shows the arena's fronts: every fine-tune judged at an interpolation too, the
    L2-SP sweep inside one job per (task, seed), no second base and no process per knob value."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    workdir = make_workdir(tmp_path, config)
    proc = snakemake(workdir, "--dry-run", "--printshellcmds")
    jobs = [(rule, wildcards) for rule, wildcards, _ in jobs_printed(proc.stdout + proc.stderr)]
    counts = by_rule(jobs)
    arms = {w["arm"] for rule, w in jobs if rule == "arm_run"}
    tasks = {w["task"] for rule, w in jobs if rule == "arm_run"}
    assert counts["base_model"] == 1 and arms == {"random", "predicted", "stm", "l2_sp"} and len(tasks) == 6
    assert counts["arm_run"] == len(arms) * len(tasks) and counts["plain_scores"] == len(tasks)
    judged = [line for line in proc.stdout.splitlines() if re.search(r"forgetmap (arm|evaluate-arm) ", line)]
    assert len(judged) == counts["arm_run"] + counts["plain_scores"]
    assert all(re.search(r"--alphas '?\[0\.5\]'?", line) for line in judged)
    sweeps = [line for line in judged if "/l2_sp/" in line]
    assert len(sweeps) == len(tasks) and all('"l2_sp": [0.1, 1.0]' in line for line in sweeps)
    assert {"fronts.png", "fronts.tsv", "tests.tsv"} <= {Path(line).name for line in proc.stdout.split()}


def test_gpu_resources_come_from_the_config(tmp_path):
    cfg = edited(tiny_config(), lambda c: (c["models"]["tiny"]["resources"].update(
        finetune={"gpu": 2, "mem_mb": 12345, "runtime": 77, "threads": 1}),  # two processes: 6 GiB of their own
        c["models"]["tiny"]["finetune"].update(processes=2), c.pop("mitigation")))  # online replay needs 1 process
    proc = snakemake(make_workdir(tmp_path, cfg), "--dry-run")
    block = proc.stdout.split("rule finetune:")[1].split("\n\n")[0]
    assert "gpu=2" in block and "mem_mb=12345" in block and "runtime=77" in block


def untimed(config: dict, gpu: int = 0) -> dict:
    """`config` leaving the model jobs' runtime to the estimate (on `gpu` GPUs each)."""
    def edit(c):
        for stage in ("base", "finetune", "score"):
            c["models"]["tiny"]["resources"][stage].pop("runtime")
            if gpu and stage != "base":
                c["models"]["tiny"]["resources"][stage]["gpu"] = gpu
    return edited(config, edit)


def time_rows(text: str) -> dict[str, tuple[int, int]]:
    """The time table's rows: job -> (jobs, SLURM minutes)."""
    table = text.split("forgetmap: time of each job")[1].split("the whole plan")[0]
    return {line[17:47].strip(): (int(line[47:].split()[0]), int(re.search(r"(\d+) min\s+\[", line).group(1)))
            for line in table.splitlines()[2:] if line.startswith("  tiny")}


def test_a_dry_run_states_each_jobs_time_and_its_slurm_time_where_the_config_leaves_it_unset(tmp_path):
    proc = snakemake(make_workdir(tmp_path / "cpu", untimed(tiny_config())), "--dry-run")
    text = proc.stdout + proc.stderr
    rows = time_rows(text)
    assert {"base model", "finetune (longest)", "score shard 0", "token losses", "plain fine-tune judged",
            "arm random"} <= set(rows)
    assert rows["score shard 0"][0] == rows["score shard 1"][0] == 4 and rows["finetune (longest)"][0] == 3
    assert re.search(r"the whole plan \(jobs already done included\): [\d.]+ CPU core-hours", text)
    # where each figure comes from: this CPU's own, or the nearest measured CPU's scaled by this machine's probe
    assert re.search(r"  \[1\] .*(: measured on this device|'s scaled by the CPU probe \(x[\d.]+ train)", text)
    # each job's SLURM time is the table's: the estimate x1.5 and 5 minutes, the longest of its stage's
    block = proc.stdout.split("rule finetune:")[1].split("\n\n")[0]
    assert f"runtime={rows['finetune (longest)'][1]}," in block.replace(" ", "") + ","
    assert rows["finetune (longest)"][1] == rows["arm random"][1]  # one stage: the time of its longest job
    # the runtime a config sets is kept, and no table is printed for it
    plain = snakemake(make_workdir(tmp_path / "set"), "--dry-run")
    assert "time of each job" not in plain.stdout + plain.stderr and "runtime=10" in plain.stdout


def test_a_plan_whose_jobs_go_to_a_cluster_never_probes_this_machine(tmp_path):
    """Under the SLURM profile the jobs run on the cluster's nodes: the dry run probes nothing on the submitting host
    (no probe kept, the table saying the figures are borrowed and why) but plans the probe as a job on the CPU jobs'
    partition, sizes every job as a cold start (no warm server forks cluster jobs), and takes the nodes' own figures
    where the profile names their CPU (`cpu_model`), planning no probe job then."""
    from forgetmap.cost.rates import read_rates

    workdir = make_workdir(tmp_path / "wf", untimed(tiny_config()))
    kept = tmp_path / "kept"
    proc = snakemake(workdir, "--dry-run", "--profile", "profiles/slurm", env={"FORGETMAP_ARCHITECTURES": str(kept)})
    text = proc.stdout + proc.stderr
    assert ("as they are: jobs run on the slurm cluster's nodes, never probed from this machine; partition cpu not "
            "measured yet: its probe job (results/cost/probes/cpu.json) runs first") in text
    assert re.search(r"^cpu_probe\s+1$", text, re.M)  # the probe, as a job on the partition the CPU jobs go to
    assert not list(kept.rglob("measured-*.json")) and "scaled by the CPU probe" not in text
    assert "forked from the run's warm process" not in text and text.count("Using profiles") == 1
    machine = next(d["machine"] for d in read_rates()["devices"].values() if d.get("kind") == "cpu")
    nodes = workdir / "profiles/nodes"
    nodes.mkdir()
    (nodes / "config.yaml").write_text((workdir / "profiles/slurm/config.yaml").read_text().replace(
        "default-resources:\n", f"default-resources:\n  cpu_model: \"'{machine}'\"\n"))
    proc = snakemake(workdir, "--dry-run", "--profile", "profiles/nodes", env={"FORGETMAP_ARCHITECTURES": str(kept)})
    text = proc.stdout + proc.stderr
    assert re.search(rf"  \[1\] {re.escape(machine)}, .*: measured on this device", text) and "never probed" not in text
    assert "cpu_probe" not in text  # a CPU the rates file has measured: no probe job
    assert not list(kept.rglob("measured-*.json"))


def test_a_gpu_without_figures_of_its_own_borrows_them_and_the_table_says_so(tmp_path):
    workdir = make_workdir(tmp_path / "a100", untimed(edited(tiny_config(), lambda c: c.pop("mitigation")), gpu=1))
    named = snakemake(workdir, "--dry-run", "--default-resources", "gpu_model='a100_80gb'")
    text = named.stdout + named.stderr
    assert ("h200's for a100, x0.32 by their bf16 peaks (training, scoring) and x0.32 by their memory bandwidths "
            "(decoding): forgetmap.cost.cards") in text
    assert "a100 GPU-hours" in text
    unnamed = snakemake(workdir, "--dry-run")
    text = unnamed.stdout + unnamed.stderr
    assert "?: the slowest card: no GPU model named (name it: the profile's gpu_model)" in text
    assert re.search(r"[\d.]+ \w+\? GPU-hours", text)


def test_a_plan_of_an_architecture_read_before_imports_neither_torch_nor_transformers(tmp_path):
    """What planning reads of the base (its config, size, blocks, module names, positions, the bytes its forward
    keeps, a score job's traced memory, LoRA's parameters) is kept after the first dry run (forgetmap.kept): a second
    dry run in a process that cannot import torch, transformers, accelerate or peft plans the same jobs with the
    same resources and memory table, and still refuses an arena knob the architecture cannot serve, naming it."""
    kept = tmp_path / "architectures"
    env = {"FORGETMAP_ARCHITECTURES": str(kept)}

    def gpus(c):
        for stage in ("finetune", "score"):
            c["models"]["tiny"]["resources"][stage].update(gpu=1, gpu_memory_gib=80)
        c["mitigation"]["arms"]["adapters"] = {"lora": {"r": 4, "alpha": 8, "dropout": 0.0,
                                                        "target_modules": ["q_proj", "v_proj"]}}
    workdir = make_workdir(tmp_path / "wf", edited(tiny_config(), gpus))
    made = snakemake(workdir, "--dry-run", env=env)
    readings = {p.name.split("-")[0] for p in kept.rglob("*.json")}
    assert {"demo_json", "shape", "text", "modules", "activation_coefficients", "traced", "lora_parameters"} <= readings
    refused = ("tests/without_torch.py",)
    read = snakemake(workdir, "--dry-run", env=env, runner=(REPO / refused[0],))
    assert "import refused" not in read.stderr, read.stderr[-3000:]

    def memory_table(text):
        return [line for line in text.splitlines() if line.startswith("  tiny ")]

    def jobs(proc):  # in any order (Snakemake's varies between runs)
        return sorted(map(repr, jobs_printed(proc.stdout + proc.stderr)))
    assert jobs(read) == jobs(made)
    assert memory_table(read.stdout + read.stderr) == memory_table(made.stdout + made.stderr)
    assert len(memory_table(made.stdout + made.stderr)) >= 3 and "not traced" not in made.stdout + made.stderr
    write_config(workdir, edited(tiny_config(), lambda c: (gpus(c), c["mitigation"]["arms"]["adapters"]["lora"].update(
        target_modules=["q_proj", "query_key_value"]))))
    bad = snakemake(workdir, "--dry-run", env=env, runner=(REPO / refused[0],), check=False)
    assert bad.returncode != 0 and "import refused" not in bad.stderr
    assert ("mitigation.arms.adapters.lora.target_modules: query_key_value not in the base of model 'tiny' "
            "(LlamaForCausalLM); its modules: ") in bad.stdout + bad.stderr


def test_a_config_error_stops_before_the_dag_naming_the_key(tmp_path):
    cfg = edited(tiny_config(), lambda c: c["models"]["tiny"]["finetune"].update(lr="fast"))
    workdir = make_workdir(tmp_path, cfg)
    proc = snakemake(workdir, "--dry-run", check=False)
    assert proc.returncode != 0
    assert "config key models.tiny.finetune.lr: value 'fast' is invalid" in proc.stdout + proc.stderr
    assert not (workdir / "results").exists()


def test_a_task_of_an_unknown_category_is_named(tmp_path):
    cfg = edited(tiny_config(), lambda c: c["tasks"]["city_qa"].update(category="geography"))
    proc = snakemake(make_workdir(tmp_path, cfg), "--dry-run", check=False)
    assert proc.returncode != 0 and "tasks.city_qa.category: value 'geography'" in proc.stdout + proc.stderr


def test_the_workflow_passes_snakemakes_linter(tmp_path):
    proc = snakemake(make_workdir(tmp_path), "--lint")
    assert "Congratulations, your workflow is in a good condition!" in proc.stdout + proc.stderr


def test_an_empty_upstream_corpus_is_refused_before_any_job_naming_the_file(tmp_path):
    workdir = make_workdir(tmp_path)
    (workdir / "resources").mkdir()
    pd.DataFrame({"example_id": pd.Series([], dtype=str), "source": pd.Series([], dtype=str),
                  "kind": pd.Series([], dtype=str), "text": pd.Series([], dtype=str)}).to_parquet(
        workdir / "resources/up.parquet")
    cfg = edited(tiny_config(), lambda c: c["upstream"].update(demo={"format": "parquet", "path": "resources/up.parquet"}))
    proc = snakemake(make_workdir(workdir, cfg), "--dry-run", check=False)
    assert proc.returncode != 0 and "resources/up.parquet: no examples" in proc.stdout + proc.stderr
    assert not (workdir / "results").exists()


def test_duplicate_upstream_ids_fail_before_any_job(tmp_path):
    workdir = make_workdir(tmp_path)
    (workdir / "resources").mkdir()
    pd.DataFrame({"example_id": ["a", "b", "a"], "source": "web", "kind": "lm", "text": ["x", "y", "z"]}).to_parquet(
        workdir / "resources/up.parquet")
    cfg = edited(tiny_config(), lambda c: c["upstream"].update(demo={"format": "parquet", "path": "resources/up.parquet"}))
    proc = snakemake(make_workdir(workdir, cfg), "--dry-run", check=False)
    assert proc.returncode != 0
    assert "resources/up.parquet: row 2, column 'example_id': duplicate id 'a'" in proc.stdout + proc.stderr


@pytest.mark.parametrize("profile", [(), ("--profile", "profiles/slurm")], ids=["local", "slurm"])
@pytest.mark.parametrize("name, n_upstream, n_tasks, arms, arm_tasks",
                         [("olmo-1b", 141_871, 85, 7, 20), ("pythia-1b", 10_000, 19, 3, 8)])
def test_paper_scale_example_configs_plan_one_job_per_finetune_and_shard(tmp_path, name, n_upstream, n_tasks, arms,
                                                                         arm_tasks, profile):
    workdir = make_workdir(tmp_path)
    config_path = example_config(workdir, name, n_upstream=n_upstream)  # its data and models, paths overridden
    cfg = yaml.safe_load(config_path.read_text())
    shards = -(-n_upstream // cfg["shard_size"])
    jobs = planned_jobs(workdir, *profile, "--configfile", str(config_path), env={"HF_HUB_CACHE": str(workdir / "hub")})
    counts = by_rule(jobs)
    fractional = cfg["models"][next(iter(cfg["models"]))].get("score", {}).get("cells", 1) < 1  # olmo-1b: 0.5
    assert counts["finetune"] == n_tasks and counts.get("score_cells", 0) == n_tasks * shards * fractional
    assert counts["score"] == (1 if fractional else n_tasks + 1) * shards  # the base, and every task of a full map
    assert counts["shard_upstream"] == shards and counts["forgetting_matrix"] == 1
    assert "city_qa" not in {w.get("task") for _, w in jobs}  # the demo config is replaced, not merged
    # the paper's splits and replay arms: plain fine-tuning is the matrix's checkpoint, never trained twice
    assert counts["predict"] == len(cfg["prediction"]["splits"]) * 9  # every default method, semantic included
    assert counts["arm_run"] == arms * arm_tasks and counts["plain_scores"] == arm_tasks
    assert counts["heldout_set"] == 1 and counts["mitigation_summary"] == 1



def sbatch_call(rule: str, resources: dict, threads: int = 1) -> str:
    """The sbatch command the SLURM executor plugin would submit for a job with these resources (its own
    submit-string functions; the partition as its executor passes it)."""
    from types import SimpleNamespace

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    typed = {k: int(v) if v.lstrip("-").isdigit() else v for k, v in resources.items()}

    class Resources(dict):
        __getattr__ = dict.__getitem__

    job = SimpleNamespace(resources=Resources(typed), threads=threads, name=rule)
    params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": f"rule_{rule}", "account": "",
              "partition": f"-p {typed['slurm_partition']}" if typed.get("slurm_partition") else "", "workdir": "."}
    return get_submit_command(job, params) + set_gres_string(job)


@pytest.mark.parametrize("name", ["olmo-1b", "pythia-1b"])
def test_under_the_slurm_profile_a_job_goes_to_the_gpu_partition_exactly_when_it_asks_for_gpus(tmp_path, name):
    """Every job of the example configs, GPU rules beyond fine-tuning and scoring included (arms, held-out
    scores, token losses, similarities): its partition follows its GPU request, and the plugin's sbatch
    string makes a GPU job one task that claims all its GPUs (never one task per GPU), on one node."""
    workdir = make_workdir(tmp_path)
    config_path = example_config(workdir, name, n_upstream=20_000)
    config = yaml.safe_load(config_path.read_text())
    (model,) = config["models"]
    config["models"][model]["resources"]["finetune"]["gpu"] = 4  # a multi-GPU fine-tune (FSDP, 4 processes)
    config["models"][model]["finetune"]["processes"] = 4
    arms = config["mitigation"]["arms"]  # (an online arm measures its model inside one process)
    config["mitigation"]["arms"] = {name: arm for name, arm in arms.items() if arm.get("replay") != "online"}
    config_path.write_text(yaml.safe_dump(config))
    jobs = planned_with_resources(workdir, "--profile", "profiles/slurm", "--configfile", str(config_path),
                                  env={"HF_HUB_CACHE": str(workdir / "hub")})
    asks = {rule for rule, _, resources in jobs if int(resources.get("gpu", 0))}
    assert {"finetune", "score", "arm_run", "plain_scores", "semantic_similarity", "gradient_similarity"} <= asks
    for rule, _, resources in jobs:
        gpus = int(resources.get("gpu", 0))
        assert resources.get("slurm_partition") == ("gpu" if gpus else "cpu"), (rule, resources)
        call = sbatch_call(rule, resources)
        assert "--ntasks-per-gpu" not in call and "--ntasks=" not in call.replace("--ntasks=1", ""), call
        assert (f"--gpus={gpus}" in call) == bool(gpus), call
        assert "--nodes=1" in call, call  # a 4-GPU fine-tune's processes on one node
    finetune = next(sbatch_call(r, res) for r, _, res in jobs if r == "finetune")
    assert "--gpus=4" in finetune and "-p gpu" in finetune and "--ntasks" not in finetune


def test_the_olmo2_7b_example_plans_its_fsdp_fine_tunes_sized_for_its_gpus(tmp_path):
    """config/examples/olmo2-7b.yaml at paper scale, its base's real config.json in the hub cache (OLMo-2 7B's
    widths: planning reads no weights): 85 four-GPU fine-tunes and vLLM scoring on one node each, and the
    memory table in the dry run's log: each process needs about 35 GiB of its 47.5 GiB A6000 with gradient
    checkpointing, which `auto` turns on (without it, 51 GiB), and the host 17 GiB of the 64,000 MB asked. A
    forecast task's fine-tune monitored: the table states a check's memory (24.3 GiB per process)."""
    import json

    workdir = make_workdir(tmp_path)
    config_path = example_config(workdir, "olmo2-7b", n_upstream=20_000)
    snapshot = next((workdir / "hub").glob("models--allenai--OLMo-2-1124-7B/snapshots/*"))
    config = json.loads((snapshot / "config.json").read_text())
    config.update(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=32, max_position_embeddings=4096, vocab_size=100352, tie_word_embeddings=False)
    (snapshot / "config.json").write_text(json.dumps(config))
    proc = snakemake(workdir, "--dry-run", "--profile", "profiles/slurm", "--configfile", str(config_path),
                     env={"HF_HUB_CACHE": str(workdir / "hub")})
    jobs = jobs_printed(proc.stdout + proc.stderr)
    counts = by_rule([(rule, wildcards) for rule, wildcards, _ in jobs])
    assert {resources["nodes"] for rule, _, resources in jobs if rule == "finetune"} == {"1"}
    assert counts["finetune"] == 85 and counts["score"] == 2 and counts["score_cells"] == 85 * 2  # cells: 0.5
    line = next(l for l in (proc.stdout + proc.stderr).splitlines() if "finetune (85 tasks" in l)
    fields = line.split()
    assert fields[0] == "olmo2-7b" and fields[-6:-4] == ["4", "on"], line
    assert 30 < float(fields[-4]) < 40 and fields[-3] == "47.5" and fields[-2] == "17.0" and fields[-1] == "64000"
    rows = {l.split("(")[0].split(maxsplit=1)[1].strip(): l.split() for l in (proc.stdout + proc.stderr).splitlines()
            if l.startswith("  olmo2-7b ") and "finetune" not in l}
    print("\n".join(" ".join(r) for r in rows.values()))
    # the engine's bf16 weights and one 2,049-token sequence; the gradient job's fp32 weights and one example
    assert 13 < float(rows["score"][-4]) < 15 and rows["score"][-3] == "47.5", rows
    assert 30 < float(rows["gradient similarity"][-4]) < 47.5 / 1.1 and rows["gradient similarity"][-3] == "47.5", rows
    assert rows["semantic similarity"][-3] == "?", rows  # its GPU's memory is not configured
    # a forecast task's FSDP fine-tune monitored (finetune.monitor): its four processes score the probes in step,
    # and the table states what a check holds beside the sharded weights (the probes in batches of 16,384 tokens)
    cfg = yaml.safe_load(config_path.read_text())
    watched = sorted(cfg["tasks"])[0]
    cfg["tasks"][watched]["forecast"] = True
    cfg["models"]["olmo2-7b"]["finetune"]["monitor"] = {"every": 100}
    cfg["models"]["olmo2-7b"]["score"]["cells"] = 1  # a forecast reads its fit rows in full
    monitored = tmp_path / "monitored.yaml"
    monitored.write_text(yaml.safe_dump(cfg))
    proc = snakemake(workdir, "--dry-run", "--profile", "profiles/slurm", "--configfile", str(monitored),
                     env={"HF_HUB_CACHE": str(workdir / "hub")})
    lines = (proc.stdout + proc.stderr).splitlines()
    at = next(i for i, l in enumerate(lines) if f"finetune, monitored (1 task: {watched})" in l)
    assert lines[at].split()[-6:-4] == ["4", "on"], lines[at]
    check = re.fullmatch(r"\s+its monitor's checks \(the probes scored between steps\): (\d+\.\d) GiB", lines[at + 1])
    assert check and 5 < float(check.group(1)) < float(lines[at].split()[-4]), lines[at:at + 2]
    # the GPU model a profile names sizes a job whose memory the config leaves out: a 24 GB card is refused
    profile = workdir / "profiles/small-gpus"
    profile.mkdir()
    (profile / "config.yaml").write_text((workdir / "profiles/slurm/config.yaml").read_text() +
                                         "set-resources:\n  gradient_similarity:\n    gpu_model: rtx_a5000\n")
    cfg = yaml.safe_load(config_path.read_text())
    cfg["models"]["olmo2-7b"]["resources"]["gradient"].pop("gpu_memory_gib")
    config_path.write_text(yaml.safe_dump(cfg))
    refused = snakemake(workdir, "--dry-run", "--profile", str(profile), "--configfile", str(config_path),
                        env={"HF_HUB_CACHE": str(workdir / "hub")}, check=False)
    refused.stderr += refused.stdout
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert re.search(r"profile setting set-resources gradient_similarity: gpu_model=rtx_a5000: gradient similarity "
                     r"\(one example\) of model 'olmo2-7b' needs 3\d\.\d GiB .* each GPU has 24.0 GiB: give the job "
                     r"a larger GPU", refused.stderr), refused.stderr[-3000:]
