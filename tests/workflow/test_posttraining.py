"""A map of checkpoints nobody trained here (Harmon et al.'s post-training map): a base model, a chain
base -> SFT -> DPO of stand-ins with a chat template, and a post-trained model from the HF cache whose
tokenizer differs. No fine-tune job runs; Z is in bits per byte; correctness compares each stage with
the one before it, the base prompted few-shot and the chat models zero-shot through their template."""

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from evals import run_lighteval, run_lm_eval
from helpers import by_rule, data_file, edited, library_warnings, make_workdir, page_data, planned_jobs, snakemake
from standins import TULU_TEMPLATE, cache_standin, save_standin, sentences

pytestmark = pytest.mark.workflow
STAGES = ("base", "finetune", "score", "semantic", "gradient", "analysis")
HUB = {"HF_HUB_CACHE": "hub"}  # relative to the workdir: set per test below


def map_config() -> dict:
    """No task at all: the rows are checkpoints."""
    return {
        "seed": 0, "shard_size": 16,
        "upstream": {"bench": {"format": "parquet", "path": "resources/bench.parquet",
                               "answers": {"sources": {"gsm": {"extract": "number"}}}}},
        "categories": {"sft": {"group": "in_domain"}, "preference": {"group": "in_domain"},
                       "instruct": {"group": "in_domain"}},
        "models": {"chain": {
            "upstream": "bench", "base": {"kind": "pretrained", "path": "models/base"},
            "shots": 2, "z": "bits_per_byte",
            "checkpoints": {
                "sft": {"path": "models/sft", "category": "sft"},
                "dpo": {"path": "models/dpo", "category": "preference", "reference": "sft"},
                "other": {"path": "org/other-instruct", "category": "instruct"},
            },
            # Harmon et al.'s measurement: answers sampled with 2 seeds, extracted from the text
            "score": {"token_budget": 1024, "max_length": 96,
                      "correctness": {"answers": "sampled", "seeds": 2, "max_new_tokens": 6, "stop": []}},
            "resources": {s: {"gpu": 0, "threads": 1, "mem_mb": 1000, "runtime": 10} for s in STAGES}}},
    }


def benchmark_frame() -> pd.DataFrame:
    """Plain text, multiple-choice items of two sources (k = 2 and 4) and free-form chat items."""
    texts = sentences(40, seed=3)
    rows = [{"example_id": f"doc-{i}", "source": "web", "kind": "lm", "text": t} for i, t in enumerate(texts[:12])]
    for i, t in enumerate(texts[12:24]):
        options = ["yes", "no"] if i % 2 else ["red", "green", "blue", "north"]
        answer = options[i % len(options)]
        rows.append({"example_id": f"mc-{i}", "source": "arc" if i % 2 else "mmlu", "kind": "lm",
                     "text": f"Question: {t}\nAnswer: {answer}", "prompt": f"Question: {t}\nAnswer:",
                     "choices": options, "answer": answer})
    for i, t in enumerate(texts[24:32]):
        rows.append({"example_id": f"qa-{i}", "source": "gsm", "kind": "chat", "prompt": t,
                     "response": str(i + 3), "answer": str(i + 3)})
    return pd.DataFrame(rows)


def write_map(workdir):
    (workdir / "resources").mkdir(exist_ok=True)
    benchmark_frame().to_parquet(workdir / "resources/bench.parquet")
    # 256 positions: the base's two-shot prompts (up to ~190 tokens) are asked whole
    save_standin(workdir / "models/base", "llama", seed=0, max_positions=256)  # a base: no chat template
    save_standin(workdir / "models/sft", "llama", TULU_TEMPLATE, seed=1, max_positions=256)
    save_standin(workdir / "models/dpo", "llama", TULU_TEMPLATE, seed=2, max_positions=256)
    save_standin(workdir / "models/rl", "llama", TULU_TEMPLATE, seed=4, max_positions=256)
    cache_standin(workdir / "hub", "org/other-instruct", "olmo2", TULU_TEMPLATE, seed=3, vocab_size=300,
                  max_positions=256)


def hub(workdir) -> dict:
    return {"HF_HUB_CACHE": str(workdir / "hub")}


@pytest.fixture(scope="module")
def mapped(tmp_path_factory):
    workdir = make_workdir(tmp_path_factory.mktemp("posttraining") / "wf", map_config())
    write_map(workdir)
    proc = snakemake(workdir, env=hub(workdir))
    (workdir / "run.out").write_text(proc.stdout + proc.stderr)
    return workdir


def test_a_map_of_checkpoints_plans_pointers_and_scores_but_no_fine_tune(tmp_path):
    workdir = make_workdir(tmp_path / "wf", map_config())
    write_map(workdir)
    counts = by_rule(planned_jobs(workdir, env=hub(workdir)))
    assert "finetune" not in counts and "prepare_task" not in counts
    assert counts["posttrained"] == 3 and counts["base_model"] == 1
    assert counts["score"] == 4 * 2  # (base + 3 checkpoints) x 2 shards of 16
    assert "semantic_similarity" not in counts and "gradient_similarity" not in counts  # no task texts


def test_the_map_gives_z_in_bits_per_byte_against_each_rows_reference(mapped):
    assert "Traceback" not in (mapped / "run.out").read_text()
    assert library_warnings(mapped) == []
    matrix = pq.read_table(mapped / "results/chain/forgetting.parquet")
    meta = json.loads(matrix.schema.metadata[b"forgetmap"])
    assert meta["statistic"] == "bpb_change" and meta["references"] == {"sft": "base", "dpo": "sft", "other": "base"}
    assert meta["categories"] == {"sft": "sft", "dpo": "preference", "other": "instruct"}

    def bpb(run):
        frames = [pd.read_parquet(mapped / f"results/chain/scores/{run}/shard-{k}.parquet") for k in (0, 1)]
        frame = pd.concat(frames)
        assert (frame["n_bytes"] > 0).all()
        return (frame["nll"].to_numpy(np.float64) * frame["n_tokens"] / frame["n_bytes"] / np.log(2)).to_numpy()

    base, sft, dpo, other = (bpb(r) for r in ("base", "sft", "dpo", "other"))
    frame = matrix.to_pandas()
    np.testing.assert_allclose(frame["sft"], sft - base, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(frame["dpo"], dpo - sft, rtol=1e-4, atol=1e-5)  # the stage before, not the base
    np.testing.assert_allclose(frame["other"], other - base, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(frame["base_nll"], base, rtol=1e-5)
    # the scored text is the same whatever the tokenizer: so are its bytes
    bytes_of = {r: pd.concat([pd.read_parquet(mapped / f"results/chain/scores/{r}/shard-{k}.parquet") for k in (0, 1)])
                for r in ("base", "other")}
    lm = bytes_of["base"]["example_id"].str.startswith("doc-").to_numpy()
    assert (bytes_of["base"]["n_bytes"].to_numpy()[lm] >= bytes_of["other"]["n_bytes"].to_numpy()[lm] - 8).all()
    assert (bytes_of["base"]["n_tokens"] != bytes_of["other"]["n_tokens"]).any()  # other tokens, same text


def test_correctness_pairs_seeds_and_compares_each_stage_with_the_one_before(mapped):
    rates = pd.read_csv(mapped / "results/chain/correctness/rates.tsv", sep="\t", dtype={"seed": str})
    assert set(rates["seed"]) == {"all", "0", "1"}

    shards = pd.concat([pd.read_parquet(data_file(mapped, "bench", k)) for k in (0, 1)])

    def scores(run):
        frame = pd.concat([pd.read_parquet(mapped / f"results/chain/scores/{run}/shard-{k}.parquet") for k in (0, 1)])
        frame["source"] = shards["source"].to_numpy()
        return frame.dropna(subset=["correct"])

    runs = {r: scores(r) for r in ("base", "sft", "dpo", "other")}
    for frame in runs.values():  # every (item, seed): its raw text, its extracted answer (or none), its verdict
        assert len(frame) == 20 and all(len(g) == 2 for g in frame["generations"])
        assert all(len(a) == 2 and len(c) == 2 for a, c in zip(frame["answers"], frame["correct_seeds"]))
        assert (frame["n_generated"] > 0).all() and (frame["correct"] == [c[0] for c in frame["correct_seeds"]]).all()
    seeds = {r: np.array(f["correct_seeds"].tolist()) for r, f in runs.items()}
    for seed in (0, 1):
        tasks = rates[(rates["level"] == "task") & (rates["seed"] == str(seed))].set_index("task")
        assert set(tasks.index) == {"sft", "dpo", "other"}
        base, sft, dpo = seeds["base"][:, seed], seeds["sft"][:, seed], seeds["dpo"][:, seed]
        assert tasks.loc["dpo", "n10"] == int(((sft == 1) & (dpo == 0)).sum())  # the stage before, same seed
        assert tasks.loc["dpo", "n01"] == int(((sft == 0) & (dpo == 1)).sum())
        assert tasks.loc["sft", "n10"] == int(((base == 1) & (sft == 0)).sum())
    per_seed = rates[(rates["level"] == "overall") & (rates["seed"] != "all")]["F_true"]
    overall = rates[(rates["level"] == "overall") & (rates["seed"] == "all")].iloc[0]
    assert overall["F_true"] == pytest.approx(per_seed.mean()) and overall["F_true_sd"] == pytest.approx(per_seed.std())
    # the share of answers nothing could be extracted from, per (row, source), after and before
    gsm = rates[(rates["seed"] == "all") & (rates["source"] == "gsm") & (rates["task"] == "dpo")].iloc[0]
    unread = np.array([[a is None for a in row] for row in runs["dpo"]["answers"]])[runs["dpo"]["source"] == "gsm"]
    assert gsm["unextracted_after"] == pytest.approx(unread.mean())


def test_the_explorer_marks_checkpoint_rows(mapped):
    data = page_data(mapped / "results/chain/explorer.html")
    rows = {t["name"]: t for t in data["tasks"]}
    assert rows["dpo"]["kind"] == "checkpoint"
    assert rows["dpo"]["checkpoint"] == {"path": "models/dpo", "reference": "sft"}
    assert rows["other"]["category"] == "instruct"


def test_the_base_is_prompted_few_shot_and_chat_rows_through_their_template(tmp_path):
    from forgetmap.correctness.items import encode_items
    from forgetmap.models import load_tokenizer

    write_map(tmp_path)
    frame = benchmark_frame()
    settings = {"target_delimiter": " ", "max_length": 512, "max_new_tokens": 4, "chat_template": "auto", "shots": 2}
    base = load_tokenizer(str(tmp_path / "models/base"))
    rows, items = encode_items(base, frame, settings)
    first = base.decode(items[0].context, skip_special_tokens=True)
    assert first.count("Question:") == 3 and first.endswith(frame.loc[rows[0], "prompt"])
    # the shots are solved items of the same source (mmlu), each with its gold answer, never the item itself
    solved = {f"{r.prompt} {r.answer}" for r in frame.iloc[rows].itertuples() if r.source == "mmlu"}
    shots = first.split("\n\n")[:-1]
    assert len(shots) == 2 and set(shots) <= solved and first.count(frame.loc[rows[0], "prompt"]) == 1
    again = encode_items(base, frame, settings)[1]
    assert all(np.array_equal(a.context, b.context) for a, b in zip(items, again))  # seeded by the item
    chat = load_tokenizer(str(tmp_path / "models/sft"))
    zero = encode_items(chat, frame, {**settings, "chat_template": "tokenizer", "shots": 0})[1]
    assert chat.decode(zero[-1].context).endswith("<|assistant|>\n") and "Question:" not in chat.decode(zero[-1].context)


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["models"]["chain"].update(z="nats_per_token"),
     "config key models.chain.z: nats_per_token, and checkpoint 'other' (org/other-instruct) splits text into other "
     "tokens than its reference 'base'"),
    (lambda c: c["models"]["chain"]["checkpoints"]["dpo"].update(reference="rl"),
     "config key models.chain.checkpoints.dpo.reference: value 'rl' is neither `base` nor a checkpoint"),
    (lambda c: c["models"]["chain"]["checkpoints"]["sft"].update(reference="dpo"),
     "config key models.chain.checkpoints.sft.reference: the chain sft -> dpo -> sft is a cycle"),
    (lambda c: c["models"]["chain"]["checkpoints"]["sft"].update(path="org/not-cached"),
     "config key models.chain.checkpoints.sft.path: the Hugging Face model 'org/not-cached' is not in the local "
     "cache"),
    (lambda c: c["models"]["chain"]["checkpoints"].update(raw={"path": "models/base", "category": "sft"}),
     "config key models.chain.checkpoints.raw.chat_template: `tokenizer`, and 'models/base' has no chat template"),
    (lambda c: c["models"]["chain"]["checkpoints"]["sft"].update(category="rlhf"),
     "config key models.chain.checkpoints.sft.category: value 'rlhf' is not a category"),
    (lambda c: c["models"]["chain"]["checkpoints"]["sft"].update(shots=3),
     "config key models.chain.checkpoints.sft.shots: value 3: few-shot prompts are plain text"),
    (lambda c: c["models"]["chain"]["base"].update(kind="demo"),
     "config key models.chain.checkpoints: checkpoints are compared with a pretrained base"),
    (lambda c: c["models"]["chain"]["checkpoints"]["dpo"].update(forecast=True),
     "config key models.chain.checkpoints.dpo.forecast: a forecast completes Z against the base in nats per token; "
     "this row is compared with 'sft'"),
])
def test_a_bad_map_fails_before_any_job_naming_the_key(tmp_path, edit, message):
    workdir = make_workdir(tmp_path / "wf", edited(map_config(), edit))
    write_map(workdir)
    proc = snakemake(workdir, "--dry-run", check=False, env=hub(workdir))
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_chat_row_without_a_response_fails_at_planning_naming_the_row(tmp_path):
    """It once passed planning and stopped the shard's scoring job."""
    workdir = make_workdir(tmp_path / "wf", map_config())
    write_map(workdir)
    frame = benchmark_frame()
    frame.loc[frame["example_id"] == "qa-2", "response"] = None
    frame.to_parquet(workdir / "resources/bench.parquet")
    proc = snakemake(workdir, "--dry-run", check=False, env=hub(workdir))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out and not (workdir / "results/data").exists()
    assert "resources/bench.parquet: row 26, column 'response': empty or missing text (1 such row(s))" in out


def test_a_pattern_that_matches_no_answer_fails_at_the_first_job_naming_the_key(tmp_path):
    config = edited(map_config(), lambda c: c["upstream"]["bench"]["answers"]["sources"].update(
        gsm={"extract": "regex", "pattern": r"The final answer: (\d+)#"}))
    workdir = make_workdir(tmp_path / "wf", config)
    write_map(workdir)
    proc = snakemake(workdir, "results/chain/scores/base/shard-1.parquet", check=False, env=hub(workdir))
    log = (workdir / "results/logs/chain/score/base/shard-1.log").read_text()
    assert proc.returncode != 0 and not (workdir / "results/chain/scores/base/shard-1.parquet").exists()
    assert "config key upstream.bench.answers.sources.gsm.pattern: source 'gsm': the pattern 'The final answer: " in log
    assert "matched none of 16 generated answers; one of them: '" in log and "Traceback" not in log


# --- evaluation logs the user already holds -------------------------------------------------------------------

def logs_config() -> dict:
    """Options scoring (lm-eval's acc): one row scored here, the same checkpoint's lm-eval log beside it."""
    config = map_config()
    config["upstream"]["bench"]["path"] = "resources/mc.parquet"
    model = config["models"]["chain"]
    model.update(shots=0, z="nats_per_token", score={"token_budget": 1024, "max_length": 96})
    config["forecast"] = {"k": 6}
    model["checkpoints"] = {
        "sft": {"path": "models/sft", "category": "sft", "chat_template": "auto"},
        "dpo": {"path": "models/dpo", "category": "preference", "chat_template": "auto"},
        # a new checkpoint forecast from 6 scored probes: its pointer and one probe-scoring job, no shard
        "rl": {"path": "models/rl", "category": "preference", "chat_template": "auto", "forecast": True},
        "sft_log": {"logs": {"format": "lm_eval", "files": ["evals/sft/results/*/samples_bench_mc_*.jsonl"]},
                    "category": "sft"},
        "dpo_log": {"logs": {"format": "lm_eval", "files": ["evals/dpo/results/*/samples_*.jsonl"],
                             "align": "id", "id": "{doc[example_id]}"}, "category": "preference",
                    "reference": "sft_log"},
        "dpo_lighteval": {"logs": {"format": "lighteval", "files": ["evals/dpo-lighteval/results/details/**/*.parquet"],
                                   "metric": "acc"}, "category": "preference"},
    }
    return config


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    workdir = make_workdir(tmp_path_factory.mktemp("logs") / "wf", logs_config())
    write_map(workdir)
    frame = benchmark_frame()
    frame = frame[frame["kind"] == "lm"].reset_index(drop=True)  # documents and multiple-choice items
    frame.to_parquet(workdir / "resources/mc.parquet")
    items = frame[frame["answer"].notna()]
    for name in ("sft", "dpo"):  # asked as forgetmap asks a post-trained row: through its chat template
        run_lm_eval(workdir / f"models/{name}", items, workdir / f"evals/{name}", chat_template=True)
    run_lighteval(workdir / "models/dpo", items, workdir / "evals/dpo-lighteval")
    proc = snakemake(workdir, env=hub(workdir))
    (workdir / "run.out").write_text(proc.stdout + proc.stderr)
    return workdir


def test_an_lm_eval_log_gives_the_rates_forgetmap_measures_itself(logged):
    assert "Traceback" not in (logged / "run.out").read_text()
    rates = pd.read_csv(logged / "results/chain/correctness/rates.tsv", sep="\t")
    tasks = rates[rates["level"] == "task"].set_index("task")
    counts = ["N", "n00", "n01", "n10", "n11"]
    assert tasks.loc["sft_log", counts].tolist() == tasks.loc["sft", counts].tolist()
    assert tasks.loc["sft_log", "F_true"] == pytest.approx(tasks.loc["sft", "F_true"])
    assert tasks.loc["sft", "N"] == 12
    scored = pd.concat([pd.read_parquet(logged / f"results/chain/scores/sft/shard-{k}.parquet") for k in (0, 1)])
    imported = pd.concat([pd.read_parquet(logged / f"results/chain/scores/sft_log/shard-{k}.parquet") for k in (0, 1)])
    assert imported["correct"].fillna(-1).tolist() == scored["correct"].fillna(-1).tolist()  # item by item
    assert imported["nll"].isna().all()  # a log has no NLL: the row is not in Z
    matrix = pq.read_schema(logged / "results/chain/forgetting.parquet").names
    assert "sft" in matrix and "sft_log" not in matrix and "dpo_log" not in matrix
    # the id-aligned row is compared with the logged stage before it
    dpo = imported.dropna(subset=["correct"])["correct"].to_numpy()
    after = pd.concat([pd.read_parquet(logged / f"results/chain/scores/dpo_log/shard-{k}.parquet") for k in (0, 1)])
    after = after.dropna(subset=["correct"])["correct"].to_numpy()
    assert tasks.loc["dpo_log", "n10"] == int(((dpo == 1) & (after == 0)).sum())


def test_logs_that_do_not_align_fail_naming_the_file_and_the_item(logged, tmp_path):
    from forgetmap.correctness.logs import import_logs
    from forgetmap.errors import DataError

    shards = [str(data_file(logged, "bench", k)) for k in (0, 1)]
    files = sorted((logged / "evals/sft/results").rglob("samples_*.jsonl"))
    lines = files[0].read_text().splitlines()
    settings = {"format": "lm_eval", "metric": None, "align": "prompt", "id": None,
                "key": "models.chain.checkpoints.sft_log.logs"}
    short = tmp_path / "samples_short.jsonl"
    short.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(DataError, match=r"^config key models.chain.checkpoints.sft_log.logs: seed 0 .*: no log holds "
                                        r"1 upstream item\(s\): 'mc-11'"):
        import_logs({**settings, "files": [[str(short)]]}, shards, str(tmp_path / "out.parquet"))
    stray = tmp_path / "samples_stray.jsonl"
    record = json.loads(lines[0])
    record["arguments"]["gen_args_0"]["arg_0"] = "Question: nobody asked this?\nAnswer:"
    stray.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    with pytest.raises(DataError, match=r"samples_stray.jsonl: line 1 \(doc_id 0\): its prompt .* is no upstream"):
        import_logs({**settings, "files": [[str(stray)]]}, shards, str(tmp_path / "out.parquet"))
    with pytest.raises(DataError, match=r"line 1 \(doc_id 0\): no metric field 'exact_match'; numeric fields: acc"):
        import_logs({**settings, "metric": "exact_match", "files": [[str(files[0])]]}, shards,
                    str(tmp_path / "out.parquet"))
    # two seeds: one verdict per seed, seed 0's in `correct`
    flipped = tmp_path / "samples_seed1.jsonl"
    records = [json.loads(line) for line in lines]
    for r in records:
        r["acc"] = 1.0 - r["acc"]
    flipped.write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = import_logs({**settings, "files": [[str(files[0])], [str(flipped)]]}, shards, str(tmp_path / "two.parquet"))
    table = pd.read_parquet(tmp_path / "two.parquet")
    assert summary["seeds"] == 2 and all(a + b == 1 for a, b in table["correct_seeds"])
    assert not (tmp_path / "out.parquet").exists()  # nothing half-written by the failures


def test_lighteval_details_import_item_by_item(logged):
    details = pd.concat([pd.read_parquet(p) for p in sorted((logged / "evals/dpo-lighteval/results").rglob("*.parquet"))])
    verdict = {d["query"]: int(m["acc"]) for d, m in zip(details["doc"], details["metric"])}
    shards = pd.concat([pd.read_parquet(data_file(logged, "bench", k)) for k in (0, 1)])
    scores = pd.concat([pd.read_parquet(logged / f"results/chain/scores/dpo_lighteval/shard-{k}.parquet")
                        for k in (0, 1)])
    items = shards["answer"].notna().to_numpy()
    assert scores["correct"].to_numpy()[items].tolist() == [verdict[p] for p in shards["prompt"][items]]
    assert (scores["k"].to_numpy()[items] == shards["choices"][items].map(len).to_numpy()).all()
    assert scores["predicted"].notna().sum() == 12
    rates = pd.read_csv(logged / "results/chain/correctness/rates.tsv", sep="\t").set_index("task")
    assert rates.loc["dpo_lighteval", "N"].max() == 12


def test_an_item_map_is_made_from_lm_eval_and_lighteval_logs_of_checkpoints(logged):
    """The monitor's item map from the logs the tools wrote: sft's and dpo's lm-eval samples and dpo's LightEval
    details, every item named as the monitor names an lm-eval task's (`bench_mc/{doc_id}`: lm-eval's document
    number, LightEval's document id, both the item's row in the task's data), each row the tool's own verdicts."""
    import json

    from forgetmap.monitor.item_logs import item_map_from_logs

    lighteval = {"files": str(logged / "evals/dpo-lighteval/results/details/**/*.parquet"), "format": "lighteval",
                 "metric": "acc"}
    item_map = item_map_from_logs({"sft": str(logged / "evals/sft/results/*/samples_bench_mc_*.jsonl"),
                                   "dpo": str(logged / "evals/dpo/results/*/samples_*.jsonl"),
                                   "dpo_lighteval": lighteval})
    assert item_map.rows == ["sft", "dpo", "dpo_lighteval"]
    assert item_map.item_ids.tolist() == [f"bench_mc/{i}" for i in range(12)]
    details = pd.concat([pd.read_parquet(p) for p in sorted((logged / "evals/dpo-lighteval/results").rglob("*.parquet"))])
    verdict = {f"bench_mc/{d['id']}": int(m["acc"]) for d, m in zip(details["doc"], details["metric"])}
    assert item_map.train[2].tolist() == [verdict[i] for i in item_map.item_ids]
    (samples,) = (logged / "evals/sft/results").rglob("samples_bench_mc_*.jsonl")
    records = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    sft = {f"bench_mc/{r['doc_id']}": int(r["acc"]) for r in records}
    assert item_map.train[0].tolist() == [sft[i] for i in item_map.item_ids]
    # the same item under both tools: the same document of the task's data
    queries = {f"bench_mc/{d['id']}": d["query"] for d in details["doc"]}
    assert all(r["doc"]["prompt"] in queries[f"bench_mc/{r['doc_id']}"] for r in records)
    # each row's option margins, the gold option's log-likelihood less the best other's, as each tool logged them

    def margin(scores, gold):  # lm-eval's samples file holds each log-likelihood as text
        scores = [float(v) for v in scores]
        return scores[gold] - max(v for j, v in enumerate(scores) if j != gold)
    lm_eval_margins = {f"bench_mc/{r['doc_id']}": margin([v[0] for v in r["filtered_resps"]], int(r["target"]))
                       for r in records}
    lighteval_margins = {f"bench_mc/{d['id']}": margin(list(m["logprobs"]), int(np.atleast_1d(d["gold_index"])[0]))
                         for d, m in zip(details["doc"], details["model_response"])}
    np.testing.assert_allclose(item_map.margins[0], [lm_eval_margins[i] for i in item_map.item_ids], rtol=1e-6)
    np.testing.assert_allclose(item_map.margins[2], [lighteval_margins[i] for i in item_map.item_ids], rtol=1e-6)


# --- the example config, in miniature ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def example_map(tmp_path_factory):
    from examples import map_example

    workdir = make_workdir(tmp_path_factory.mktemp("example-map") / "wf")
    config = map_example(workdir)
    proc = snakemake(workdir, "--configfile", str(config), env=hub(workdir), timeout=1500)
    (workdir / "run.out").write_text(proc.stdout + proc.stderr)
    return workdir


def test_the_example_map_runs_in_miniature_without_fine_tuning(example_map):
    out = (example_map / "run.out").read_text()
    assert "Traceback" not in out and "rule finetune" not in out
    assert library_warnings(example_map) == []
    for model, rows in (("olmo2_1b", {"sft", "dpo", "instruct"}), ("qwen2_5_3b", {"instruct", "coder"}),
                        ("qwen2_5_7b", {"instruct", "math", "r1_distill"})):
        rates = pd.read_csv(example_map / f"results/{model}/correctness/rates.tsv", sep="\t", dtype={"seed": str})
        pair = rates[(rates["level"] == "benchmark_overall") & (rates["seed"] == "all")]
        assert set(pair["task"]) == rows and pair["F_true_sd"].notna().all()  # mean and sd over 2 seeds
        categories = set(rates[rates["level"] == "benchmark_category"]["source"])
        assert {"math", "deduction", "science_technology_engineering", "liberal_arts"} <= categories
        assert (example_map / f"results/{model}/explorer.html").exists()
    meta = json.loads(pq.read_schema(example_map / "results/qwen2_5_7b/forgetting.parquet").metadata[b"forgetmap"])
    assert meta["statistic"] == "bpb_change" and meta["references"]["r1_distill"] == "math"
    # the chain: each stage against the one before it
    meta = json.loads(pq.read_schema(example_map / "results/olmo2_1b/forgetting.parquet").metadata[b"forgetmap"])
    assert meta["references"] == {"sft": "base", "dpo": "sft", "instruct": "dpo"}
    shards = pd.concat([pd.read_parquet(p) for p in (example_map / "results/data/upstream/benchmarks").glob("*.parquet")])
    assert {"arc_challenge", "gsm8k", "bbh_boolean_expressions"} <= set(shards["source"])
    assert any(s.startswith("mmlu_") for s in shards["source"])


def asked(workdir, model: str, run: str) -> dict:
    """What a score job's log records of how its run was asked: `asked` and one prompt per source."""
    lines = (workdir / f"results/logs/{model}/score/{run}/shard-0.log").read_text().splitlines()
    return json.loads(next(line for line in reversed(lines) if line.startswith("{")))


def test_the_example_maps_rows_are_asked_as_harmon_et_al_ask_them(example_map):
    """The base and the base-like Coder plain text five-shot; every post-trained row zero-shot through its
    template, the question as the user turn, whatever the benchmark row's kind (here all `lm`)."""
    for model, run in (("olmo2_1b", "base"), ("qwen2_5_3b", "coder"), ("qwen2_5_7b", "math")):
        summary = asked(example_map, model, run)
        assert summary["asked"] == "plain"
        for prompt in summary["prompts"].values():  # plain text; as many shots as the shard has (at most 5)
            assert "<|user|>" not in prompt and prompt.endswith("Answer:") and prompt.count("\n\n") < 6
        arc = summary["prompts"]["arc_challenge"]  # six ARC items in the shard: five solved, then the question
        assert arc.count("Answer:") == 6 and arc.count("\n\n") == 5
    for model, run in (("olmo2_1b", "sft"), ("olmo2_1b", "instruct"), ("qwen2_5_7b", "r1_distill")):
        summary = asked(example_map, model, run)
        assert summary["asked"] == "template"
        for prompt in summary["prompts"].values():
            assert prompt.count("<|user|>\n") == 1 and prompt.endswith("\n<|assistant|>\n")
            assert prompt.count("Answer:") == 1  # zero-shot
    # answers run until the 384-position context is full (or EOS): the questions stay whole, the cap is reported
    rates = pd.read_csv(example_map / "results/olmo2_1b/correctness/rates.tsv", sep="\t", dtype={"seed": str})
    sources = rates[(rates["level"] == "source") & (rates["seed"] == "all")]
    assert sources["capped_after"].between(0, 1).all() and sources["capped_before"].notna().all()
    scores = pd.read_parquet(example_map / "results/olmo2_1b/scores/sft/shard-0.parquet")
    items = scores.dropna(subset=["correct"])
    assert (items["n_generated"] > 2 * 32).mean() > 0.5  # far past the miniature's old 8-token cap


def test_a_new_checkpoint_is_forecast_from_k_scored_probes(logged):
    forecast = pd.read_parquet(logged / "results/chain/forecast/forecast.parquet")
    summary = pd.read_csv(logged / "results/chain/forecast/summary.tsv", sep="\t")
    assert "rl" in forecast and forecast["rl"].notna().sum() >= 12 and list(summary["task"]) == ["rl"]
    meta = json.loads(pq.read_schema(logged / "results/chain/forecast/forecast.parquet").metadata[b"forgetmap"])
    assert meta["fit_tasks"] == ["sft", "dpo"] and len(meta["probe_ids"]) == 6
    probes = pd.read_parquet(logged / "results/chain/forecast/scores/rl.parquet")
    items = json.loads(pq.read_schema(logged / "results/chain/forecast/probes.parquet").metadata[b"forgetmap"])["items"]
    assert list(probes["example_id"][:6]) == meta["probe_ids"] and not (logged / "results/chain/scores/rl").exists()
    # the probes' 6 items (those not already probes follow them) decided right or wrong by the same scoring job:
    # the checkpoint's accuracy, F and BT against its reference (the base), through the measured rows' correctness
    assert len(items["ids"]) == 6 and set(items["ids"]) <= set(probes["example_id"]) <= \
        set(meta["probe_ids"]) | set(meta["audit_ids"]) | set(items["ids"])  # and the audit examples, after the probes
    assert list(probes["example_id"][6:6 + len(meta["audit_ids"])]) == meta["audit_ids"] and len(meta["audit_ids"]) > 2
    line = summary.set_index("task").loc["rl"]
    assert line["items_k"] == 6 and line["estimate_lower_0.9"] <= line["estimate"] <= line["estimate_upper_0.9"]
    for rate in ("acc", "F", "BT", "naive_acc", "naive_F", "naive_BT"):
        assert 0 <= line[f"items_{rate}_lower"] <= line[f"items_{rate}"] <= line[f"items_{rate}_upper"] <= 1
    assert "rl" not in pq.read_schema(logged / "results/chain/forgetting.parquet").names
    assert (logged / "results/chain/posttrained/rl/base.json").exists()


def test_adding_a_checkpoint_runs_only_its_pointer_its_scores_and_the_analyses(mapped):
    """In place (a dry run changes nothing; the config is put back): a pointer records where its files are,
    so a copy of the project elsewhere would rerun from the pointers on."""
    from helpers import write_config

    original = (mapped / "config/config.yaml").read_text()
    write_config(mapped, edited(map_config(), lambda c: c["models"]["chain"]["checkpoints"].update(
        rl={"path": "models/rl", "category": "preference", "reference": "dpo"})))
    try:
        jobs = planned_jobs(mapped, env=hub(mapped))
    finally:
        (mapped / "config/config.yaml").write_text(original)
    counts = by_rule(jobs)
    assert counts["posttrained"] == 1 and counts["score"] == 2 and "base_model" not in counts
    assert {w["run"] for r, w in jobs if r == "score"} == {"rl"}
    assert "finetune" not in counts and "shard_upstream" not in counts


def test_a_second_map_over_the_same_base_reads_its_base_scores_unless_it_scores_otherwise(mapped):
    """A model over the same pretrained base, corpus and scoring as an earlier one scores its checkpoints only and
    subtracts the earlier model's base scores; where it scores otherwise (a shorter max_length), its own base.
    In place, as above: the config is put back."""
    from helpers import write_config

    def second(max_length: int):
        def edit(cfg):
            spec = json.loads(json.dumps(cfg["models"]["chain"]))
            spec["checkpoints"] = {"rl": {"path": "models/rl", "category": "preference"}}
            spec["score"]["max_length"] = max_length
            cfg["models"]["again"] = spec
        return edited(map_config(), edit)

    original = (mapped / "config/config.yaml").read_text()
    planned = {}
    try:
        for max_length in (96, 64):
            write_config(mapped, second(max_length))
            planned[max_length] = planned_jobs(mapped, env=hub(mapped))
    finally:
        (mapped / "config/config.yaml").write_text(original)
    assert {(w["model"], w["run"]) for r, w in planned[96] if r == "score"} == {("again", "rl")}
    assert ("forgetting_matrix", "again") in {(r, w.get("model")) for r, w in planned[96]}  # its base: chain's
    assert {(w["model"], w["run"]) for r, w in planned[64] if r == "score"} == {("again", "rl"), ("again", "base")}
