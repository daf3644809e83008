"""A benchmark's items watched by the forgetting monitor: an lm-eval task defined here (offline), tokenised as
lm-eval tokenises it and scored equal to lm-eval's own log-likelihoods; a generate_until task's greedy answers equal
to lm-eval's own and judged by its filters and metric, and a corpus's free-form items judged as the score jobs judge
them; accuracy, F and BT with intervals logged at each evaluation inside TRL's `SFTTrainer` and transformers'
`Trainer`; F and BT equal to Harmon's counting where every item is scored; a resume keeps the items' baseline; the
refusals before training starts."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pandas as pd
import pytest

from monitor_run import make_trainer
from standins import WORDS, save_standin, sentences

N_ITEMS = 36
TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {items}
test_split: test
output_type: {output_type}
doc_to_text: "{{{{prompt}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{{target}}}}}"
target_delimiter: " "
metric_list:
  - metric: acc
"""


GENERATED = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {items}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["{stop}"]
  max_gen_toks: 10
  do_sample: {sample}
filter_list:
  - name: first-word
    filter:
      - function: regex
        regex_pattern: "(\\\\w+)"
      - function: take_first
  - name: whole
    filter:
      - function: take_first
metric_list:
  - metric: exact_match
"""
N_GENERATED = 8


def items_frame(n: int = N_ITEMS, seed: int = 5) -> pd.DataFrame:
    """Multiple-choice items with 2 to 4 options of English-looking words (not the demo's quiz)."""
    rng = np.random.default_rng(seed)
    texts = sentences(n, seed=seed)
    rows = []
    for i, text in enumerate(texts):
        options = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(2, 5)), replace=False)]
        rows.append({"example_id": f"q{i}", "source": "bench", "prompt": f"{text} Answer:", "choices": options,
                     "answer": options[int(rng.integers(len(options)))]})
    return pd.DataFrame(rows)


def write_task(directory, frame, name="bench_mc", output_type="multiple_choice", target="choices.index(answer)"):
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / f"{name}.jsonl"
    frame[["example_id", "prompt", "choices", "answer"]].to_json(data, orient="records", lines=True)
    (directory / f"{name}.yaml").write_text(TASK.format(name=name, items=data, output_type=output_type, target=target))
    return directory


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """(the base's directory, the lm-eval task's directory, the item map's path, its rows' correctness): a Llama
    stand-in (its tokenizer prepends BOS), and a map of six runs of the same base (its weights moved at random)."""
    os.environ.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    from transformers import AutoTokenizer

    from forgetmap.correctness.benchmark import from_lm_eval
    from forgetmap.monitor.items import ItemMap

    root = tmp_path_factory.mktemp("items")
    base = save_standin(root / "base", "llama", seed=3, width=32)
    tasks = write_task(root / "tasks", items_frame())
    tokenizer = AutoTokenizer.from_pretrained(base)
    benchmark = from_lm_eval("bench_mc", tokenizer, include_path=tasks)
    rows, margins = {}, {}
    for r in range(7):
        name = "base" if r == 0 else f"run{r}"
        rows[name], margins[name] = correctness(perturbed(base, r), tokenizer, benchmark, with_margins=True)
    frame, gaps = pd.DataFrame(rows).T, pd.DataFrame(margins).T
    frame.columns = gaps.columns = benchmark.ids
    item_map = ItemMap.from_rows(frame.drop(index="base"), before=frame.loc["base"], sources=benchmark.sources,
                                 margins=gaps.drop(index="base"))
    item_map.write(root / "items.parquet")
    return base, tasks, root / "items.parquet", frame


def perturbed(base, run: int):
    """The base (run 0), or run `run` of the map: its weights moved at random with that seed."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    if run:
        generator = torch.Generator().manual_seed(run)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    return model


def correctness(model, tokenizer, benchmark, with_margins: bool = False):
    """Each item right (1) or wrong (0); `with_margins`: and each item's option margin."""
    from forgetmap.meter import OptionMeter

    values = OptionMeter.for_items(model, tokenizer, benchmark).measure()
    return (benchmark.decide(values), benchmark.margins(values)) if with_margins else benchmark.decide(values)


def lm_eval_logliks(model, tokenizer, tasks, num_fewshot=None) -> list[np.ndarray]:
    """lm-eval's own: its HF model's log-likelihood of each request of the task, per document, in option order."""
    from lm_eval.models.huggingface import HFLM

    from forgetmap.correctness.benchmark import task_manager

    task = task_manager((str(tasks),)).load(["bench_mc"])["tasks"]["bench_mc"]
    if num_fewshot is not None:
        task.set_config(key="num_fewshot", value=num_fewshot)
    task.set_fewshot_seed(seed=1234)
    task.build_all_requests(limit=None, rank=0, world_size=1)
    requests = sorted(task.instances, key=lambda r: (r.doc_id, r.idx))
    values = [value for value, _ in HFLM(pretrained=model, tokenizer=tokenizer, batch_size=8).loglikelihood(
        requests, disable_tqdm=True)]
    documents = [r.doc_id for r in requests]
    return [np.array([v for v, d in zip(values, documents) if d == doc]) for doc in sorted(set(documents))]


def write_generated(directory, frame, name="bench_gen", stop=".", sample="false"):
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / f"{name}.jsonl"
    frame[["prompt", "answer"]].to_json(data, orient="records", lines=True)
    (directory / f"{name}.yaml").write_text(GENERATED.format(name=name, items=data, stop=stop, sample=sample))
    return directory


def lm_eval_answers(model, tokenizer, tasks, name="bench_gen") -> tuple[list[str], list[str], dict[str, list[int]]]:
    """lm-eval's own: the prompt of each of the task's documents, its HF model's greedy answers to them
    (`generate_until`), and each filter's exact_match per document from its evaluator's logged samples."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    from forgetmap.correctness.benchmark import task_manager

    manager = task_manager((str(tasks),))
    task = manager.load([name])["tasks"][name]
    task.build_all_requests(limit=None, rank=0, world_size=1)
    model_ = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=4)
    requests = sorted(task.instances, key=lambda r: r.doc_id)
    texts = model_.generate_until(requests, disable_tqdm=True)
    samples = lm_eval.simple_evaluate(model=model_, tasks=[name], task_manager=manager, log_samples=True,
                                      verbosity="ERROR")["samples"][name]
    judged = {}
    for sample in sorted(samples, key=lambda s: s["doc_id"]):
        judged.setdefault(sample["filter"], []).append(int(sample["exact_match"]))
    return [r.arguments[0] for r in requests], texts, judged


@pytest.fixture(scope="module")
def generated(bench, tmp_path_factory):
    """(the generate_until task's directory, lm-eval's exact_match per document under its first filter): the
    gold answer of every other question is the first word of the base's own greedy answer (right at the
    baseline), the others a word it does not write."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = bench[0]
    model, tokenizer = AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base)
    directory = tmp_path_factory.mktemp("generated")
    frame = pd.DataFrame({"prompt": [f"{t} Answer:" for t in sentences(N_GENERATED, seed=11)], "answer": "river"})
    _, texts, _ = lm_eval_answers(model, tokenizer, write_generated(directory, frame))
    frame["answer"] = [re.findall(r"\w+", t)[0] if i % 2 == 0 else "river" for i, t in enumerate(texts)]
    _, _, judged = lm_eval_answers(model, tokenizer, write_generated(directory, frame))
    return directory, judged["first-word"]


def test_a_generate_until_tasks_answers_are_lm_evals_and_judged_by_its_filters_and_metric(bench, generated,
                                                                                            tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.correctness.benchmark import from_lm_eval
    from forgetmap.errors import DataError
    from forgetmap.meter import OptionMeter

    base = bench[0]
    directory, truth = generated
    model, tokenizer = AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base)
    benchmark = from_lm_eval("bench_gen", tokenizer, include_path=directory, generate=True)
    assert len(benchmark) == N_GENERATED and (benchmark.options == 0).all()
    assert benchmark.generated[0].stop == (".", tokenizer.eos_token) and benchmark.generated[0].max_new_tokens == 10
    texts = OptionMeter.for_items(model, tokenizer, benchmark).measure()
    prompts, theirs, judged = lm_eval_answers(model, tokenizer, directory)
    # what each item asks is lm-eval's prompt (after the BOS it prepends), and what it writes is lm-eval's raw answer
    assert all(it.context[0] == tokenizer.bos_token_id for it in benchmark.items)
    assert [tokenizer.decode(it.context[1:]) for it in benchmark.items] == prompts
    assert prompts[0].endswith(" Answer:") and prompts[0].count("Answer:") == 1  # zero-shot, the document's own
    assert texts == theirs  # greedy, ended at the task's stop strings, as lm-eval's HFLM generates
    assert all(t and "." not in t for t in texts)  # each raw answer cut where its stop string began
    right = benchmark.decide(texts)
    assert right.tolist() == truth == judged["first-word"] and 0 < right.sum() < N_GENERATED
    whole = from_lm_eval("bench_gen", tokenizer, include_path=directory, generate=True, filter="whole")
    assert whole.decide(texts).tolist() == judged["whole"]  # another of the task's filter pipelines, by name
    assert from_lm_eval("bench_gen", tokenizer, include_path=directory, generate=True,
                        max_gen_toks=3).generated[0].max_new_tokens == 3
    # asked only where the user asks; sampling, an unknown filter and a metric that is not right or wrong refused
    with pytest.raises(DataError, match=r"no items to watch \(bench_gen \(generate_until\)\).*generate=True"):
        from_lm_eval("bench_gen", tokenizer, include_path=directory)
    frame = pd.DataFrame({"prompt": ["Say it:"], "answer": ["x"]})
    odd = write_generated(tmp_path / "odd", frame, "bench_sampled", sample="true")  # one directory: one index
    task = write_generated(odd, frame, "bench_bleu") / "bench_bleu.yaml"
    task.write_text(task.read_text().replace("exact_match", "bleu"))
    with pytest.raises(DataError, match="'bench_sampled', document 0: the task asks for sampled answers"):
        from_lm_eval("bench_sampled", tokenizer, include_path=odd, generate=True)
    with pytest.raises(DataError, match="has no filter pipeline 'strict' \\(it has first-word, whole\\)"):
        from_lm_eval("bench_gen", tokenizer, include_path=directory, generate=True, filter="strict")
    bleu = from_lm_eval("bench_bleu", tokenizer, include_path=odd, generate=True, filter="whole")
    with pytest.raises(DataError, match="'bench_bleu', document 0: its metric 'bleu' gave .* right or wrong"):
        bleu.decide(texts[:1])
    # a question is never cut: a prompt that fills the model's 128 positions leaves no room for an answer
    from forgetmap.correctness.benchmark import Benchmark, Generated
    from forgetmap.correctness.items import ExactMatch, Item

    long = Benchmark(np.array(["long"]), np.array(["x"]), [Item(np.full(128, 5), [], ["x"], 0, True)],
                     generated={0: Generated((".",), 4, ExactMatch("x"))})
    with pytest.raises(DataError, match="'long': its prompt takes 128 tokens and the model has 128 positions"):
        OptionMeter.for_items(model, tokenizer, long)


def test_a_corpus_free_form_items_are_judged_as_the_score_jobs_judge_them(bench):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.correctness.benchmark import from_frame
    from forgetmap.correctness.items import encode_items, evaluate_torch
    from forgetmap.generation import Sampling, generate_torch
    from forgetmap.meter import OptionMeter
    from forgetmap.nll import TorchScorer

    base = bench[0]
    model, tokenizer = AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base)
    questions = sentences(10, seed=13)
    frame = items_frame(4).assign(kind="lm")
    free = pd.DataFrame({"example_id": [f"f{i}" for i in range(10)], "source": "free", "kind": "lm",
                         "prompt": [f"{q} Answer:" for q in questions], "choices": None, "answer": "river"})
    frame = pd.concat([frame, free], ignore_index=True)
    settings = {"target_delimiter": " ", "chat_template": "auto", "shots": 0, "max_new_tokens": 6, "stop": [" "],
                "metric": "acc", "token_budget": 4096}
    _, encoded = encode_items(tokenizer, frame, settings)
    own = generate_torch(model, tokenizer, [it.context for it in encoded[4:]], np.full(10, 6), Sampling(stop=(" ",)))
    frame.loc[4::2, "answer"] = [t.strip() or "river" for t in own.texts[::2]]  # every other one the model's own
    assert len(from_frame(frame, tokenizer, settings, "the corpus")) == 4  # free form only where asked
    benchmark = from_frame(frame, tokenizer, settings, "the corpus", generate=True)
    assert len(benchmark) == 14 and sorted(benchmark.generated) == list(range(4, 14))
    ours = benchmark.decide(OptionMeter.for_items(model, tokenizer, benchmark).measure())
    _, items = encode_items(tokenizer, frame, settings)
    jobs = evaluate_torch(model, tokenizer, items, settings, TorchScorer(model, tokenizer.eos_token_id, 4096))
    assert ours.tolist() == jobs["correct"].tolist() and 0 < ours[4:].sum() < 10
    from forgetmap.errors import DataError
    from forgetmap.monitor.items import ItemMap, ItemWatch

    assert np.isnan(benchmark.margins(OptionMeter.for_items(model, tokenizer, benchmark, np.arange(4, 6)).measure(),
                                      np.arange(4, 6))).all()  # a free-form item has no option margin
    with pytest.raises(DataError, match="the corpus: 10 of its 14 items are free form, which have no option margin"):
        ItemWatch(benchmark, ItemMap.read(bench[2]), estimate="margins").prepare(tokenizer, 0.9)


@pytest.mark.parametrize("shots", [None, 2])
def test_an_lm_eval_tasks_items_score_as_lm_eval_scores_them(bench, shots):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.correctness.benchmark import from_lm_eval

    base, tasks, _, _ = bench
    model, tokenizer = AutoModelForCausalLM.from_pretrained(base), AutoTokenizer.from_pretrained(base)
    benchmark = from_lm_eval("bench_mc", tokenizer, include_path=tasks, num_fewshot=shots)
    assert len(benchmark) == N_ITEMS and benchmark.ids[0] == "bench_mc/0"
    assert all(item.context[0] == tokenizer.bos_token_id for item in benchmark.items)  # lm-eval's encoding: BOS once
    from forgetmap.meter import OptionMeter

    meter = OptionMeter.for_items(model, tokenizer, benchmark)
    assert meter.options.packed  # each item's context once, its options behind a block-causal mask
    ours = np.concatenate(meter.measure())  # (document, option) order
    theirs = np.concatenate(lm_eval_logliks(model, tokenizer, tasks, shots))
    assert len(ours) == len(theirs) and np.abs(ours - theirs).max() < 1e-5
    if shots:  # the solved examples lm-eval put before each question are in the context
        assert min(len(it.context) for it in benchmark.items) > 2 * min(
            len(it.context) for it in from_lm_eval("bench_mc", tokenizer, include_path=tasks).items)


@pytest.mark.filterwarnings("ignore:.*TaskManager.load:DeprecationWarning")  # the older API, on purpose
def test_the_items_are_the_same_through_lm_evals_older_task_api(bench, tmp_path, monkeypatch):
    """lm-eval 0.4.11 (Axolotl 0.19's pin) has no `TaskManager.load`: its nested `get_task_dict` gives the same
    items, a group's opened into its tasks."""
    from transformers import AutoTokenizer

    from forgetmap.correctness import benchmark as reader

    base, tasks, _, _ = bench
    tokenizer = AutoTokenizer.from_pretrained(base)
    group = tmp_path / "group"
    group.mkdir()
    (group / "bench_group.yaml").write_text("group: bench_group\ntask:\n  - bench_mc\n")
    paths = [str(tasks), str(group)]
    newer = reader.from_lm_eval("bench_group", tokenizer, include_path=paths, num_fewshot=2)
    manager = reader.task_manager(tuple(paths))

    class Older:  # the index without `load`, as lm-eval 0.4.11's
        all_tasks = manager.all_tasks

        def __getattr__(self, name):
            if name == "load":
                raise AttributeError(name)
            return getattr(manager, name)
    monkeypatch.setattr(reader, "task_manager", lambda paths: Older())
    older = reader.from_lm_eval("bench_group", tokenizer, include_path=paths, num_fewshot=2)
    assert len(older) == len(newer) == N_ITEMS and older.ids.tolist() == newer.ids.tolist()
    assert older.ids[0] == "bench_mc/0"
    for a, b in zip(older.items, newer.items):
        assert a.context.tolist() == b.context.tolist() and [o.tolist() for o in a.options] == \
            [o.tolist() for o in b.options] and a.gold == b.gold


@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")  # TRL's SFTConfig
def test_a_trl_run_logs_accuracy_F_and_BT_with_intervals_and_writes_each_items_forecast(bench, tmp_path):
    pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.correctness.transitions import rates
    from forgetmap.monitor import ForgettingMonitor
    from forgetmap.monitor.items import ItemWatch

    base, tasks, map_path, frame = bench
    watch = ItemWatch("bench_mc", str(map_path), k=12, lm_eval={"include_path": tasks})
    monitor = ForgettingMonitor(items=watch)
    trainer = make_trainer("trl", base, tmp_path / "run", monitor, max_steps=6, bf16=False)
    trainer.train()
    assert np.array_equal(monitor.item_baseline, frame.loc["base"].to_numpy())  # every item scored at the baseline
    logged = [e for e in trainer.state.log_history if "eval_forget_items_acc" in e]
    assert [e["step"] for e in logged] == [2, 4, 6]
    for entry in logged:
        for rate in ("acc", "F", "BT", "F_true", "BT_true", "naive_acc", "naive_F", "naive_BT"):
            value = entry[f"eval_forget_items_{rate}"]
            assert entry[f"eval_forget_items_{rate}_lower"] <= value <= entry[f"eval_forget_items_{rate}_upper"]
        assert entry["eval_forget_items_acc_before"] == pytest.approx(frame.loc["base"].mean())
    out = tmp_path / "run" / "forgetmap-monitor"
    table = pd.read_parquet(out / "items-00000004.parquet")
    assert len(table) == N_ITEMS and table["scored"].sum() == 12
    assert set(table.columns) >= {"item_id", "right_at_baseline", "forecast", "lower_0.9", "upper_0.9", "correct"}
    assert ((table["lower_0.9"] <= table["forecast"]) & (table["forecast"] <= table["upper_0.9"])).all()
    # the scored items' values are lm-eval's decisions on the weights of that check (the checkpoint saved there)
    checkpoint = tmp_path / "run" / "checkpoint-4"
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(base)
    logliks = lm_eval_logliks(model, tokenizer, tasks)
    from forgetmap.correctness.benchmark import from_lm_eval

    benchmark = from_lm_eval("bench_mc", tokenizer, include_path=tasks)
    truth = benchmark.decide(logliks)
    scored = table["scored"].to_numpy()
    assert np.array_equal(table["correct"][scored].to_numpy(), truth[scored])
    # the naive estimate is Harmon's counting over the scored items
    harmon = rates(frame.loc["base"].to_numpy()[scored], truth[scored], benchmark.options[scored])
    entry = logged[1]
    assert entry["eval_forget_items_naive_F"] == pytest.approx(harmon["F"])
    assert entry["eval_forget_items_naive_BT"] == pytest.approx(harmon["BT"])
    meta = json.loads(__import__("pyarrow.parquet", fromlist=["x"]).read_schema(
        out / "items-00000004.parquet").metadata[b"forgetmap"])
    assert meta["k"] == 12 and meta["method"] == "additive" and meta["benchmark"]["lm_eval"] == ["bench_mc"]


def test_an_item_map_from_lm_eval_logs_is_its_checkpoints_decisions_and_watches_a_run(bench, tmp_path):
    """lm-eval's own per-sample logs of the base and three of the map's runs (its evaluator's samples, written by its
    EvaluationTracker as `lm_eval --log_samples` writes them) made into a map by `forgetmap item-map`: each row is
    the decisions forgetmap measures on that run, the base's the map's `before`, the items named as the monitor names
    them; a run watched through it logs its rates. A checkpoint logged on other items, or a file not named as lm-eval
    names its logs, is refused, naming them as text."""
    import lm_eval
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoTokenizer

    from forgetmap.cli import main
    from forgetmap.correctness.benchmark import task_manager
    from forgetmap.errors import DataError
    from forgetmap.monitor import ForgettingMonitor
    from forgetmap.monitor.item_logs import item_map_from_logs
    from forgetmap.monitor.items import ItemMap, ItemWatch

    base, tasks, _, frame = bench
    tokenizer = AutoTokenizer.from_pretrained(base)
    manager = task_manager((str(tasks),))
    names = ["base", "run1", "run2", "run3"]
    for r, name in enumerate(names):  # as lm-eval's command saves a run's results and samples
        tracker = EvaluationTracker(output_path=str(tmp_path / "logs" / name))
        results = lm_eval.simple_evaluate(model=HFLM(pretrained=perturbed(base, r), tokenizer=tokenizer, batch_size=4),
                                          tasks=["bench_mc"], task_manager=manager, log_samples=True,
                                          evaluation_tracker=tracker, verbosity="ERROR")
        samples = results.pop("samples")
        tracker.save_results_aggregated(results=results, samples=samples)
        tracker.save_results_samples(task_name="bench_mc", samples=samples["bench_mc"])
    out = tmp_path / "map.parquet"
    assert main(["item-map", *(f"--checkpoint={n}={tmp_path}/logs/{n}/**/samples_bench_mc_*.jsonl" for n in names),
                 "--base", "base", "--out", str(out)]) == 0
    made = ItemMap.read(out)
    assert made.rows == names[1:] and made.item_ids.tolist() == [f"bench_mc/{i}" for i in range(N_ITEMS)]
    np.testing.assert_array_equal(made.train, frame.loc[names[1:], made.item_ids].to_numpy())
    np.testing.assert_array_equal(made.before, frame.loc["base", made.item_ids].to_numpy())
    measured = ItemMap.read(bench[2])  # the rows' option margins: lm-eval's log-likelihoods, forgetmap's within 1e-4
    np.testing.assert_allclose(made.margins, measured.margins[:3, measured.columns_of(made.item_ids, "the log")],
                               atol=1e-4)
    monitor = ForgettingMonitor(items=ItemWatch("bench_mc", str(out), k=12, lm_eval={"include_path": tasks},
                                                estimate="margins"))
    trainer = make_trainer("hf", base, tmp_path / "run", monitor, max_steps=2)
    trainer.train()
    entry = [e for e in trainer.state.log_history if "eval_forget_items_acc" in e][-1]
    assert entry["eval_forget_items_acc_lower"] <= entry["eval_forget_items_acc"] <= entry["eval_forget_items_acc_upper"]
    assert 0 < entry["eval_forget_items_F_upper"] - entry["eval_forget_items_F_lower"] < 1
    assert entry["eval_forget_items_acc_before"] == pytest.approx(frame.loc["base"].mean())
    # refused: a checkpoint logged on fewer items; a file lm-eval did not name
    (first,) = (tmp_path / "logs" / "run1").rglob("samples_bench_mc_*.jsonl")
    short = tmp_path / "short" / first.name
    short.parent.mkdir()
    short.write_text("".join(first.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(DataError, match=r"checkpoint 'short' lacks 1 of checkpoint 'run1'.s items \(first: bench_mc/35\)"):
        item_map_from_logs({"run1": str(first), "short": str(short)})
    renamed = short.rename(short.with_name("results.jsonl"))
    with pytest.raises(DataError, match=r"results.jsonl: not named as lm_eval names its per-sample logs"):
        item_map_from_logs({"run1": str(first), "other": str(renamed)})


def test_with_every_item_scored_F_and_BT_are_harmons_counting_and_a_resume_keeps_the_baseline(bench, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.correctness.benchmark import from_lm_eval
    from forgetmap.correctness.transitions import rates
    from forgetmap.monitor import ForgettingMonitor
    from forgetmap.monitor.items import ItemWatch

    base, tasks, _, frame = bench
    before = frame.loc["base"].to_numpy()

    def watch():
        return ItemWatch("bench_mc", k=N_ITEMS, lm_eval={"include_path": tasks})  # no map: every item scored

    first = ForgettingMonitor(items=watch())
    make_trainer("hf", base, tmp_path / "run", first, max_steps=4).train()
    tokenizer = AutoTokenizer.from_pretrained(base)
    benchmark = from_lm_eval("bench_mc", tokenizer, include_path=tasks)
    after = benchmark.decide(lm_eval_logliks(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint-4"),
                                             tokenizer, tasks))
    harmon = rates(before, after, benchmark.options)
    check = first.checks[-1]
    assert check["step"] == 4
    for rate in ("F", "BT", "F_true", "BT_true"):
        assert check[f"eval_forget_items_{rate}"] == pytest.approx(harmon[rate], abs=1e-12)
    assert check["eval_forget_items_acc"] == pytest.approx(harmon["acc_after"], abs=1e-12)
    assert check["eval_forget_items_acc_drop_upper"] >= harmon["acc_before"] - harmon["acc_after"]
    # resumed from step 2 by a new monitor and trainer: the checkpoint's baseline, not the resumed weights' scoring
    resumed = ForgettingMonitor(items=watch())
    trainer = make_trainer("hf", base, tmp_path / "run", resumed, max_steps=4)
    trainer.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
    at_two = benchmark.decide(lm_eval_logliks(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint-2"),
                                              tokenizer, tasks))
    assert not np.array_equal(at_two, before)  # what a rescoring at the resume would have taken as its baseline
    assert np.array_equal(resumed.item_baseline, before) and resumed.item_known == first.item_known
    assert [c["step"] for c in resumed.checks] == [2, 4]
    assert resumed.checks[-1]["eval_forget_items_F"] == pytest.approx(harmon["F"], abs=1e-12)


def test_generated_answers_in_the_trainer_count_as_harmon_counts_them(bench, generated, tmp_path):
    """A multiple-choice task and a generate_until task watched together (generate=True), every item scored: each
    check's F and BT are Harmon's counting of the two tasks' items, each task's rates logged by name; the generated
    items' baseline is lm-eval's judgement of the base's answers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.correctness.benchmark import from_lm_eval
    from forgetmap.correctness.transitions import rates
    from forgetmap.meter import OptionMeter
    from forgetmap.monitor import ForgettingMonitor
    from forgetmap.monitor.items import ItemWatch

    base, tasks, _, frame = bench
    directory, truth = generated
    everything = {"include_path": [tasks, directory], "generate": True}
    monitor = ForgettingMonitor(items=ItemWatch(["bench_mc", "bench_gen"], k=N_ITEMS + N_GENERATED, lm_eval=everything))
    make_trainer("hf", base, tmp_path / "run", monitor, max_steps=4).train()
    before = np.asarray(monitor.item_baseline)
    assert before[:N_ITEMS].tolist() == frame.loc["base"].tolist() and before[N_ITEMS:].tolist() == truth
    tokenizer = AutoTokenizer.from_pretrained(base)
    benchmark = from_lm_eval(["bench_mc", "bench_gen"], tokenizer, **everything)
    after = benchmark.decide(OptionMeter.for_items(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint-4"),
                                                   tokenizer, benchmark).measure())
    check = monitor.checks[-1]
    for scope, part in (("", slice(None)), ("bench_gen_", slice(N_ITEMS, None))):
        harmon = rates(before[part], after[part], benchmark.options[part])
        for rate in ("F", "BT", "F_true", "BT_true"):
            assert check[f"eval_forget_items_{scope}{rate}"] == pytest.approx(harmon[rate], abs=1e-12)
        assert check[f"eval_forget_items_{scope}acc"] == pytest.approx(harmon["acc_after"], abs=1e-12)
    # a generated item has no chance to guess right: its chance-adjusted rates are its plain ones
    assert check["eval_forget_items_bench_gen_F_true"] == check["eval_forget_items_bench_gen_F"]
    table = pd.read_parquet(tmp_path / "run" / "forgetmap-monitor" / "items-00000004.parquet")
    assert (table["options"][N_ITEMS:] == 0).all() and table["correct"].tolist() == after.tolist()


def test_a_budget_on_the_accuracy_drop_stops_training(bench, tmp_path):
    from forgetmap.monitor import ForgettingMonitor
    from forgetmap.monitor.items import ItemWatch

    base, tasks, map_path, _ = bench
    watch = ItemWatch("bench_mc", str(map_path), k=12, lm_eval={"include_path": tasks}, budget={"acc_drop": -1.0})
    trainer = make_trainer("hf", base, tmp_path / "run", ForgettingMonitor(items=watch, patience=2), max_steps=10)
    trainer.train()
    assert trainer.state.global_step == 4  # over at steps 2 and 4: saved and stopped


def test_the_margins_estimate_is_the_checks_margins_fitted_against_the_baselines_and_an_F_budget_stops(bench,
                                                                                                         tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from forgetmap.correctness.benchmark import from_lm_eval
    from forgetmap.monitor import ForgettingMonitor
    from forgetmap.monitor.items import ItemMap, ItemWatch

    base, tasks, map_path, frame = bench
    assert ItemMap.read(map_path).margins.shape == (6, N_ITEMS)  # the map's rows carry their margins
    watch = ItemWatch("bench_mc", str(map_path), k=12, lm_eval={"include_path": tasks}, estimate="margins",
                      budget={"F": -1.0})
    monitor = ForgettingMonitor(items=watch, patience=2)
    trainer = make_trainer("hf", base, tmp_path / "run", monitor, max_steps=10)
    trainer.train()
    assert trainer.state.global_step == 4  # F's upper end over -1 at steps 2 and 4: saved and stopped
    tokenizer = AutoTokenizer.from_pretrained(base)
    benchmark = from_lm_eval("bench_mc", tokenizer, include_path=tasks)
    base_margins = benchmark.margins(lm_eval_logliks(AutoModelForCausalLM.from_pretrained(base), tokenizer, tasks))
    assert np.allclose(monitor.item_baseline_margins, base_margins, atol=1e-5)  # lm-eval's log-likelihoods
    logliks = lm_eval_logliks(AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoint-4"), tokenizer, tasks)
    known = watch.known
    now, values = benchmark.margins(logliks)[known], benchmark.decide(logliks)[known]
    row = plain_chances(base_margins, known, now, values)  # the fit redone by hand on lm-eval's margins
    before = frame.loc["base"].to_numpy().astype(float)
    entry = [e for e in trainer.state.log_history if e.get("step") == 4 and "eval_forget_items_F" in e][0]
    assert entry["eval_forget_items_F"] == pytest.approx(np.mean(before * (1 - row)), abs=1e-6)
    assert entry["eval_forget_items_acc"] == pytest.approx(row.mean(), abs=1e-6)
    assert entry["eval_forget_items_F_lower"] <= entry["eval_forget_items_F"] <= entry["eval_forget_items_F_upper"]
    meta = json.loads(__import__("pyarrow.parquet", fromlist=["x"]).read_schema(
        tmp_path / "run" / "forgetmap-monitor" / "items-00000004.parquet").metadata[b"forgetmap"])
    assert meta["estimate"] == "margins" and all(0 < f < np.inf for f in meta["factors"].values())
    table = pd.read_parquet(tmp_path / "run" / "forgetmap-monitor" / "items-00000004.parquet")
    assert np.allclose(table["forecast"], row, atol=1e-6)
    # resumed from step 2 by a new monitor: the baseline's margins, the items and the budget's count come back from
    # the checkpoint (not rescored on the resumed weights), so the step-4 check is the first run's and stops it again
    resumed = ForgettingMonitor(items=ItemWatch("bench_mc", str(map_path), k=12, lm_eval={"include_path": tasks},
                                                estimate="margins", budget={"F": -1.0}), patience=2)
    trainer = make_trainer("hf", base, tmp_path / "run", resumed, max_steps=10)
    trainer.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
    assert trainer.state.global_step == 4 and [c["step"] for c in resumed.checks] == [2, 4]
    assert resumed.item_baseline_margins == monitor.item_baseline_margins
    assert resumed.item_known == monitor.item_known and resumed.item_baseline == monitor.item_baseline
    assert resumed.checks[-1]["eval_forget_items_F"] == pytest.approx(entry["eval_forget_items_F"], abs=1e-6)


def plain_chances(base, known, now, values):
    """Each item's share of the k items' residuals (margin now on margin at the baseline, np.polyfit) that leave
    its fitted margin above 0; the k as measured."""
    slope, shift = np.polyfit(base[known], now, 1)
    residuals = now - (shift + slope * base[known])
    row = np.array([np.mean(shift + slope * u + residuals > 0) for u in base])
    row[known] = values
    return row


def test_bad_items_and_maps_are_refused_before_training(bench, tmp_path):
    from transformers import AutoTokenizer

    from forgetmap.correctness.benchmark import from_lm_eval
    from forgetmap.errors import DataError
    from forgetmap.monitor import ForgettingMonitor
    from forgetmap.monitor.items import ItemMap, ItemWatch

    base, tasks, map_path, frame = bench
    tokenizer = AutoTokenizer.from_pretrained(base)
    with pytest.raises(DataError, match=r"lm-eval task 'bench_mcq' does not exist \(did you mean bench_mc"):
        from_lm_eval("bench_mcq", tokenizer, include_path=tasks)
    generation = write_task(tmp_path / "odd", items_frame(4), "bench_gen", "generate_until", "answer")
    bad_dir = write_task(generation, items_frame(4), "bench_bad",  # one directory: one index of lm-eval's tasks
                         target="7 if example_id == 'q2' else choices.index(answer)")
    with pytest.raises(DataError, match="no items to watch .*bench_gen \\(generate_until\\)"):
        from_lm_eval("bench_gen", tokenizer, include_path=generation)
    with pytest.raises(DataError, match="'bench_bad', document 2: its answer index 7 is outside its"):
        from_lm_eval("bench_bad", tokenizer, include_path=bad_dir)
    # items the map does not hold
    fewer = ItemMap.read(map_path)
    fewer = ItemMap(fewer.item_ids[:-3], fewer.sources[:-3], fewer.train[:, :-3], fewer.rows, fewer.before[:-3])
    fewer.write(tmp_path / "fewer.parquet")
    with pytest.raises(ValueError, match="estimate='margins' calibrates its interval on a map's rows' option margins"):
        ItemWatch("bench_mc", str(tmp_path / "fewer.parquet"), estimate="margins")  # a map without margins
    with pytest.raises(ValueError, match="estimate is 'completion' or 'margins', not 'model'"):
        ItemWatch("bench_mc", str(map_path), estimate="model")
    trainer = make_trainer("hf", base, tmp_path / "run", ForgettingMonitor(
        items=ItemWatch("bench_mc", str(tmp_path / "fewer.parquet"), lm_eval={"include_path": tasks})))
    with pytest.raises(DataError, match=r"fewer.parquet: 3 of the 36 items of lm-eval task\(s\) bench_mc are not "
                                        r"among its 33 items \(first: bench_mc/33, bench_mc/34, bench_mc/35\)"):
        trainer.train()
    assert trainer.state.global_step == 0
    # a map of another base: a sibling's correctness recorded as the map's base
    sibling = save_standin(tmp_path / "sibling", "llama", seed=4, width=32)
    trainer = make_trainer("hf", sibling, tmp_path / "run2", ForgettingMonitor(
        items=ItemWatch("bench_mc", str(map_path), lm_eval={"include_path": tasks})))
    with pytest.raises(DataError, match="right on other items than the map's base"):
        trainer.train()
    # a damaged map file
    (tmp_path / "cut.parquet").write_bytes(map_path.read_bytes()[:200])
    with pytest.raises(DataError, match="cut.parquet: not a readable item map"):
        ItemMap.read(tmp_path / "cut.parquet")
    with pytest.raises(ValueError, match="budget key"):
        ItemWatch("bench_mc", budget={"accuracy": 0.1})


def test_an_item_response_fit_and_the_cross_fitted_bound():
    from forgetmap.predict.bound import binomial_interval, crossfit_bound
    from forgetmap.predict.registry import make_method

    rng = np.random.default_rng(0)
    ability, slope, easiness = rng.normal(size=(24, 1)), rng.gamma(4, 0.4, size=(300, 1)), rng.normal(0.3, 1, 300)
    right = (rng.random((24, 300)) < 1 / (1 + np.exp(-(ability @ slope.T + easiness)))).astype(np.float32)
    irt = make_method("irt", dims=1).fit(right[:20])
    known = np.sort(rng.choice(300, 60, replace=False))
    strong, weak = np.argmax(ability[20:, 0]) + 20, np.argmin(ability[20:, 0]) + 20
    p_strong, p_weak = irt.predict(known[None], right[[strong], known][None])[0], \
        irt.predict(known[None], right[[weak], known][None])[0]
    assert p_strong.mean() > p_weak.mean()  # the row's ability is placed from its known items
    assert np.corrcoef(irt.alpha_[:, 0] * np.sign(irt.alpha_[:, 0].sum()), slope[:, 0])[0, 1] > 0.3
    # every item measured: the bound is the exact mean, of zero width
    values = right[strong]
    exact = crossfit_bound(values, np.arange(300), values, values, 0.9)
    assert exact.estimate == pytest.approx(values.mean()) and exact.lower == pytest.approx(exact.upper)
    interval = binomial_interval(3, 30, 0.9)
    assert interval.lower < 0.1 < interval.upper and binomial_interval(0, 30, 0.9).lower == 0.0


def test_the_k_items_are_drawn_at_random_or_chosen_for_the_map_and_forecast_cross_fitted(bench):
    from transformers import AutoTokenizer

    from forgetmap.correctness.benchmark import from_lm_eval
    from forgetmap.monitor.items import ItemMap, ItemWatch
    from forgetmap.predict.forecast import choose

    base, tasks, map_path, frame = bench
    benchmark = from_lm_eval("bench_mc", AutoTokenizer.from_pretrained(base), include_path=tasks)
    item_map = ItemMap.read(map_path)
    drawn = ItemWatch(benchmark, item_map, k=8, seed=3)
    drawn.prepare(None, 0.9)
    assert np.array_equal(drawn.known, np.sort(np.random.default_rng(3).choice(N_ITEMS, 8, replace=False)))
    chosen = ItemWatch(benchmark, item_map, k=8, choose="dopt")
    chosen.prepare(None, 0.9)
    assert np.array_equal(chosen.known, np.sort(choose(item_map.train, 8, "dopt", 0, "m")))
    values = frame.loc["run3"].to_numpy()[drawn.known].astype(float)
    row, held = drawn.forecast(values)
    assert np.array_equal(row[drawn.known], values) and ((row >= 0) & (row <= 1)).all() and held.shape == (8,)
    # each scored item's held-out forecast is the map's completion from the other seven alone
    others = np.delete(drawn.known, 2)
    alone = np.clip(drawn.model.predict(others[None], np.delete(values, 2)[None].astype(np.float32))[0], 0, 1)
    assert held[2] == pytest.approx(alone[drawn.known[2]], abs=1e-6)
