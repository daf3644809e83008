"""The config: one definition gives schema, defaults and checks; errors name key, value, allowed."""

from pathlib import Path

import pytest
import yaml

from forgetmap import config as fm_config
from forgetmap.cli import main
from forgetmap.errors import ConfigError
from forgetmap.plan import Plan

REPO = Path(__file__).resolve().parents[2]


def mitigation(**overrides):
    """A mitigation section over a split `s` whose test task is city_qa (job_qa trains)."""
    return {"tasks": {"split": "s"}, "heldout": 100,
            "arms": {"p": {"replay": "predicted", "method": "mf", "split": "s"}}, **overrides}


def minimal():
    return {"upstream": {"demo": {"format": "demo"}}, "categories": {"w": {"group": "in_domain"}},
            "tasks": {"city_qa": {"category": "w"}}, "models": {"m": {"upstream": "demo"}}}


def test_defaults_are_filled_from_the_schema():
    cfg = fm_config.resolve(minimal())
    assert cfg["shard_size"] == 10000
    assert cfg["models"]["m"]["finetune"]["lr"] == 2e-6 and cfg["models"]["m"]["finetune"]["steps"] == 1000
    assert cfg["models"]["m"]["resources"]["finetune"]["gpu"] == 1
    assert cfg["tasks"]["city_qa"]["finetune"] == {}


def test_task_overrides_apply_to_that_task_only():
    raw = minimal()
    raw["tasks"]["job_qa"] = {"category": "w", "finetune": {"lr": 1e-4, "lora": {"r": 8}}}
    plan = Plan(raw)
    assert plan.finetune_settings("m", "job_qa")["lr"] == 1e-4
    assert plan.finetune_settings("m", "job_qa")["lora"]["r"] == 8
    assert plan.finetune_settings("m", "job_qa")["lora"]["alpha"] == 16
    assert plan.finetune_settings("m", "city_qa")["lr"] == 2e-6


@pytest.mark.parametrize("mutate, expected", [
    (lambda c: c["models"]["m"].update(finetune={"lr": "fast"}), "models.m.finetune.lr: value 'fast'"),
    (lambda c: c["models"]["m"].update(finetune={"method": "qlora"}), "allowed: full, lora"),
    (lambda c: c["tasks"]["city_qa"].update(categry="w"), "tasks.city_qa: unknown key(s) categry"),
    (lambda c: c["tasks"]["city_qa"].update(category="nope"), "tasks.city_qa.category: value 'nope' is not a category"),
    (lambda c: c["models"]["m"].update(upstream="dolma"), "models.m.upstream: value 'dolma'"),
    (lambda c: c["models"]["m"].update(tasks=["city_qa", "ghost"]), "models.m.tasks: value 'ghost' is not a task"),
    (lambda c: c["tasks"].update(base={"category": "w"}), "reserved"),
    (lambda c: c["tasks"].update(my_task={"category": "w"}), "tasks.my_task.path: no file given"),
    (lambda c: c["upstream"].update(dolma={"format": "parquet"}), "upstream.dolma.path: required"),
    (lambda c: c["models"]["m"].update(base={"kind": "pretrained"}), "models.m.base.path: required"),
    (lambda c: c["models"]["m"].update(resources={"score": {"gpu": -1}}), "models.m.resources.score.gpu: value -1"),
    (lambda c: c["models"]["m"].update(score={"gpu_memory_utilization": 1.2}),
     "models.m.score.gpu_memory_utilization: value 1.2"),  # vLLM takes a share in (0, 1]
    (lambda c: c.pop("models"), "'models' is a required property"),
    (lambda c: c.pop("tasks"), "config key models.m.tasks: model 'm' has no row: no task is configured for it"),
    (lambda c: c.pop("upstream"), "models.m.upstream: value 'demo' is not an upstream corpus"),
    (lambda c: c["prediction"].update(methods={"mf": {"rank2": 3}}),
     "config key prediction.methods.mf.rank2: mf has no such parameter; allowed: rank, reg, ranks"),
    (lambda c: c["prediction"].update(methods={"semantic": {"similarity_train": 1}}),
     "config key prediction.methods.semantic.similarity_train: semantic has no such parameter"),
    (lambda c: c["prediction"].update(methods=["mf", "svd++"]), "prediction.methods.1: value 'svd++' is not allowed"),
    (lambda c: c.update(mitigation=mitigation(arms={"p": {"replay": "predicted", "method": "svd", "split": "s"}})),
     "config key mitigation.arms.p.method: value 'svd' is not a configured prediction method"),
    (lambda c: c.update(mitigation=mitigation(arms={"p": {"replay": "predicted", "method": "mf", "split": "t"}})),
     "config key mitigation.arms.p.split: value 't' is not a prediction split"),
    (lambda c: c.update(mitigation=mitigation(tasks=["job_qa"])),
     "config key mitigation.arms.p: task 'job_qa' is not a test task of split 's'"),
    (lambda c: c.update(mitigation=mitigation(tasks={"split": "nope"})),
     "config key mitigation.tasks.split: value 'nope' is not a prediction split"),
    (lambda c: c.update(mitigation=mitigation(heldout=2400)),
     "config key mitigation.heldout: value 2400 leaves no replay pool"),
    (lambda c: c.update(mitigation=mitigation(arms={"r": {"replay": "random", "ratio": 0}})),
     "config key mitigation.arms.r.ratio: value 0 is invalid"),
    (lambda c: c.update(mitigation=mitigation(arms={"s": {"tokens": "stm", "tau": -1}})),
     "config key mitigation.arms.s.tau: value -1 is invalid"),
    (lambda c: c.update(mitigation=mitigation(arms={"s": {"tokens": "stm", "q": 1.5}})),
     "config key mitigation.arms.s.q: value 1.5 is invalid"),
    (lambda c: c.update(mitigation=mitigation(arms={"o": {"replay": "online", "method": "mf",
                                                          "statistic": "forgotten_1to0"}})),
     "config key mitigation.arms.o.statistic: not used by this arm (replay: online, tokens: none, weights: none); "
     "it applies to predicted, ground_truth"),
    (lambda c: c.update(mitigation=mitigation(arms={"r": {"replay": "random", "temperature": 0.5}})),
     "config key mitigation.arms.r.temperature: not used by this arm (replay: random"),
    (lambda c: c.update(mitigation=mitigation(arms={"f": {"weights": "flow", "tau": 2.0}})),
     "config key mitigation.arms.f.tau: not used by this arm"),
    (lambda c: c["prediction"].update(k=3000),
     "config key prediction.k: value 3000 known examples leave nothing to predict: model 'm' has 2400 upstream examples"),
    (lambda c: c.update(mitigation=mitigation(arms={"p": {"replay": "predicted", "method": "mf",
                                                          "statistic": "forgotten_1to0"}})),
     "config key mitigation.arms.p.method: value 'mf' is not a configured predictor of Y; allowed "
     "(correctness.methods): logistic_mf"),
    (lambda c: (c.update(mitigation=mitigation(arms={"g": {"replay": "ground_truth", "statistic": "forgotten_1to0"}},
                                               heldout=2), upstream={"demo": {"format": "demo", "n_examples": 6}}),
                c["prediction"].update(k=2)),
     "config key mitigation.arms.g.statistic: forgotten_1to0 needs upstream items with an answer"),
    (lambda c: c.update(mitigation=mitigation(arms={"r": {"replay": "random", "risk": 1.0}})),
     "config key mitigation.arms.r.risk: not used by this arm (replay: random, tokens: none, weights: none); it "
     "applies to predicted"),
    (lambda c: c.update(mitigation=mitigation(arms={"r": {"replay": "predicted", "method": "knn", "risk": 1.0,
                                                          "statistic": "forgotten_1to0"}})),
     "config key mitigation.arms.r.risk: risk-aware replay needs replay: predicted on the loss statistic"),
    (lambda c: c.update(mitigation=mitigation(arms={"p": {"replay": "predicted", "method": "mf", "risk": 1.0,
                                                          "risk_level": 0.95}})),
     "config key mitigation.arms.p.risk_level: value 0.95 is not one of prediction.intervals (0.8, 0.9)"),
    (lambda c: c.update(mitigation=mitigation(arms={"p": {"replay": "predicted", "method": "logistic_mf",
                                                          "risk": 1.0}})),
     "config key mitigation.arms.p.method: 'logistic_mf' writes no intervals"),
    (lambda c: c["prediction"].update(probes="best"), "prediction.probes: value 'best' is not allowed"),
    (lambda c: c.update(mitigation=mitigation(arms={"none": {"replay": "random"}})),
     "config key mitigation.arms: the name 'none' is reserved for plain fine-tuning"),
    (lambda c: c["models"]["m"].update(finetune={"method": "lora", "processes": 2}),
     "finetune.processes (models.m / tasks.city_qa): value 2 needs method 'full'"),
    (lambda c: c["models"]["m"].update(finetune={"processes": 4}, resources={"finetune": {"gpu": 2}}),
     "resources.finetune.gpu (models.m / tasks.city_qa): value 2 must equal finetune.processes (4)"),
    # forecasting: too many probes, nothing measured to fit on, a method that cannot serve a forecast
    (lambda c: (c["tasks"].update(add_qa={"category": "w"}, mul_qa={"category": "w", "forecast": True}),
                c.update(forecast={"k": 2400})),
     "config key forecast.k: value 2400 probes leave nothing to forecast: model 'm' has 2400 upstream examples"),
    (lambda c: c["models"]["m"].update(forecast=["job_qa"]),
     "config key models.m.forecast: model 'm' has 1 measured task(s) that are not forecast (city_qa); a forecast "
     "is fitted on at least 2"),
    (lambda c: c["tasks"]["job_qa"].update(forecast="check"),
     "config key tasks.job_qa.forecast: model 'm' has 1 measured task(s)"),
    (lambda c: c["models"]["m"].update(forecast=["add_qa"]),
     "config key models.m.forecast: value 'add_qa' is not a task of model 'm'; allowed: city_qa, job_qa"),
    (lambda c: (c["tasks"].update(add_qa={"category": "w"}, mul_qa={"category": "w", "forecast": True}),
                c.update(forecast={"method": "semantic"})),
     "config key forecast.method: 'semantic' cannot serve a forecast"),
    (lambda c: (c["tasks"].update(add_qa={"category": "w"}, mul_qa={"category": "w", "forecast": True}),
                c.update(forecast={"method": "random"})),
     "config key forecast.method: 'random' cannot serve a forecast"),
    (lambda c: (c["tasks"].update(add_qa={"category": "w"}, mul_qa={"category": "w", "forecast": True}),
                c["prediction"].update(methods=["mean", "knn"], probe_evaluation={"method": "knn"})),
     "config key forecast.method: value 'mf' is not a configured prediction method; allowed: mean, knn"),
    (lambda c: (c["tasks"].update(add_qa={"category": "w"}, mul_qa={"category": "w", "forecast": True}),
                c.update(forecast={"probes": "best"})),
     "config key forecast.probes: value 'best' is not allowed; allowed: random, dopt, medoids"),
    (lambda c: (c["tasks"].update(add_qa={"category": "w"}, mul_qa={"category": "w", "forecast": True}),
                c.update(mitigation=mitigation(tasks=["mul_qa"], arms={"p": {"replay": "predicted", "method": "knn"}}))),
     "config key mitigation.arms.p.method: value 'knn', but task 'mul_qa' is read from its forecast, which "
     "forecast.method ('mf') completes"),
    (lambda c: (c["tasks"].update(add_qa={"category": "w"}, mul_qa={"category": "w", "forecast": True}),
                c.update(mitigation=mitigation(tasks=["mul_qa"], arms={"g": {"replay": "ground_truth"}}))),
     "config key mitigation.arms.g.replay: ground_truth reads the measured row, and task 'mul_qa' is only forecast"),
    (lambda c: (c["tasks"].update(add_qa={"category": "w"}, mul_qa={"category": "w", "forecast": True}),
                c.update(mitigation=mitigation(tasks=["mul_qa"], arms={"o": {"replay": "online", "method": "mf"}}))),
     "config key mitigation.arms.o: task 'mul_qa' is not a test task of any prediction split"),
    # the arena's knobs out of range, two sweeps in one arm, two ways of freezing, FSDP
    (lambda c: c.update(mitigation=mitigation(interpolation=[0.5, 1.5])),
     "config key mitigation.interpolation.1: value 1.5 is invalid: 1.5 is greater than the maximum of 1"),
    (lambda c: c.update(mitigation=mitigation(arms={"l2": {"l2_sp": -0.1}})),
     "config key mitigation.arms.l2.l2_sp: value -0.1 is invalid: -0.1 is less than the minimum of 0"),
    (lambda c: c.update(mitigation=mitigation(arms={"kl": {"kl_base": [0.1, -1]}})),
     "config key mitigation.arms.kl.kl_base.1: value -1 is invalid"),
    (lambda c: c.update(mitigation=mitigation(arms={"e": {"ema": 1.0}})),
     "config key mitigation.arms.e.ema: value 1.0 is invalid: 1.0 is greater than or equal to the maximum of 1"),
    (lambda c: c.update(mitigation=mitigation(arms={"f": {"train_top": 0}})),
     "config key mitigation.arms.f.train_top: value 0 is invalid"),
    (lambda c: c.update(mitigation=mitigation(arms={"x": {"l2_sp": [0.1, 1], "kl_base": [0.1, 1]}})),
     "config key mitigation.arms.x: knobs l2_sp and kl_base are both lists; an arm sweeps one knob"),
    (lambda c: c.update(mitigation=mitigation(arms={"x": {"train_top": 1, "train_modules": ["mlp"]}})),
     "config key mitigation.arms.x.train_modules: give train_top or train_modules, not both"),
    (lambda c: (c["models"]["m"].update(finetune={"processes": 2}, resources={"finetune": {"gpu": 2}}),
                c.update(mitigation=mitigation(arms={"x": {"kl_base": 0.1}}))),
     "config key mitigation.arms.x.kl_base: the arena's training changes run in one training process; "
     "models.m.finetune.processes is 2"),
    (lambda c: c.update(mitigation=mitigation(arms={"x": {"targets": "sdft", "tokens": "stm"}})),
     "config key mitigation.arms.x.targets: SDFT rewrites the responses that token masks and example weights"),
    (lambda c: c.update(mitigation=mitigation(arms={"x": {"replay": "random", "generation": {"max_new_tokens": 8}}})),
     "config key mitigation.arms.x.generation: not used by this arm (replay: random"),
    (lambda c: c.update(mitigation=mitigation(arms={"x": {"replay": "self_generated", "temperature": 0.5}})),
     "config key mitigation.arms.x.temperature: not used by this arm (replay: self_generated"),
    (lambda c: c.update(mitigation=mitigation(arms={"x": {"lora": {"rank": 4}}})),
     "config key mitigation.arms.x.lora: unknown key(s) rank; allowed: alpha, dropout, r, target_modules"),
])
def test_errors_name_the_key_the_value_and_what_is_allowed(mutate, expected):
    raw = minimal()
    raw["tasks"]["job_qa"] = {"category": "w"}
    raw["prediction"] = {"splits": {"s": {"test": ["city_qa"]}}}
    mutate(raw)
    with pytest.raises(ConfigError) as err:
        Plan(raw)  # the config's checks, then the plan's (settings per job)
    assert expected in str(err.value)


@pytest.mark.parametrize("arm, expected", [
    ({"train_top": [1, 5]}, "mitigation.arms.x.train_top: value [1, 5]: the base of model 'm' (LlamaForCausalLM) has "
                            "4 transformer blocks"),
    ({"lora": {"r": 256}}, "mitigation.arms.x.lora.r: value 256: above the hidden size of the base of model 'm' "
                           "(LlamaForCausalLM), 128"),
    ({"train_modules": ["feed_forward"]}, "mitigation.arms.x.train_modules: feed_forward not in the base of model "
                                          "'m' (LlamaForCausalLM); its modules: "),
    ({"lora": {"target_modules": ["query_key_value"]}}, "mitigation.arms.x.lora.target_modules: query_key_value not in"),
    ({"targets": "sdft", "generation": {"max_new_tokens": 256}}, "mitigation.arms.x.generation.max_new_tokens: value "
                                                                "256: the base of model 'm' (LlamaForCausalLM) has 256 positions"),
])
def test_arena_knobs_the_demo_architecture_cannot_take_are_errors_before_any_job(arm, expected):
    from forgetmap.config import preflight

    raw = minimal()
    raw["tasks"]["job_qa"] = {"category": "w"}
    raw["prediction"] = {"splits": {"s": {"test": ["city_qa"]}}}
    raw["mitigation"] = mitigation(arms={"x": arm})
    plan = Plan(raw)
    with pytest.raises(ConfigError) as err:
        preflight.check(plan)
    assert expected in str(err.value)
    raw["mitigation"] = mitigation(arms={"x": {"train_top": [1, 4], "train_modules": None, "lora": None}})
    preflight.check(Plan(raw))


def test_replay_by_the_chance_of_1to0_reads_y_or_its_prediction():
    raw = {**minimal(), "prediction": {"splits": {"s": {"test": ["city_qa"]}}},
           "mitigation": mitigation(arms={"p": {"replay": "predicted", "method": "knn", "statistic": "forgotten_1to0"},
                                          "g": {"replay": "ground_truth", "statistic": "forgotten_1to0"},
                                          "z": {"replay": "ground_truth"}}),
           "correctness": {"methods": ["logistic_mf", "knn"]}}
    raw["tasks"]["job_qa"] = {"category": "w"}
    plan = Plan(raw)
    assert plan.mitigation.replay_inputs("m", "p", "city_qa")["prediction"] == "results/m/correctness/prediction/s/knn"
    assert plan.mitigation.replay_inputs("m", "g", "city_qa")["matrix"] == "results/m/correctness/forgetting_1to0.parquet"
    assert plan.mitigation.replay_inputs("m", "z", "city_qa")["matrix"] == "results/m/forgetting.parquet"
    assert plan.mitigation.replay_settings("m", "p", 0, "city_qa")["statistic"] == "forgotten_1to0"
    assert plan.mitigation.summary_inputs("m")["transitions"] == "results/m/correctness/transitions.parquet"


def test_method_hyperparameters_come_from_the_config():
    raw = {**minimal(), "prediction": {"methods": {"mf": {"rank": 2, "reg": 0.5}, "knn": None}}}
    plan = Plan(raw)
    assert plan.prediction.predict_settings("mf")["params"] == {"rank": 2, "reg": 0.5}
    assert plan.prediction.predict_settings("knn")["params"] == {}
    assert Plan(minimal()).cfg["prediction"]["methods"]["logistic_mf"] == {}  # the default list, as a mapping


def test_a_config_of_imported_models_alone_needs_no_upstream_or_tasks(tmp_path):
    from helpers import released_fixture

    released_fixture(tmp_path)
    plan = Plan({"models": {"paper": {"imported": {"matrix": str(tmp_path / "ftd-ppl-inc-full.npy")}}}})
    assert plan.computed == [] and plan.tasks["paper"] == ["aeslc", "cb", "wsc", "lima", "oasst1"]
    assert plan.wildcard_constraints()["computed"] == "(?!)"  # no rule for computed models matches anything


def test_shipped_configs_are_valid():
    import jsonschema

    for path in [REPO / "config/config.yaml", REPO / "config/test/config.yaml"]:
        fm_config.resolve(yaml.safe_load(path.read_text()))
    for path in sorted((REPO / "config/examples").glob("*.yaml")):  # their data: tests/workflow/test_examples.py
        jsonschema.Draft202012Validator(fm_config.SCHEMA).validate(yaml.safe_load(path.read_text()))
    Plan(yaml.safe_load((REPO / "config/config.yaml").read_text()))


def test_schema_file_is_generated_from_the_definition(tmp_path):
    main(["schema", "--out", str(tmp_path / "schema.yaml")])
    assert (tmp_path / "schema.yaml").read_text() == (REPO / "config/schema.yaml").read_text(), \
        "config/schema.yaml is stale: run `forgetmap schema --out config/schema.yaml`"


def test_a_key_given_twice_in_one_mapping_is_an_error_naming_both_lines(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("models:\n  m:\n    upstream: demo\n    finetune: {lr: 1.0e-4}\n    finetune: {steps: 5}\n")
    with pytest.raises(ConfigError, match=r"config.yaml: line 5: key 'finetune' is given twice in one mapping "
                                          r"\(first at line 4\)"):
        fm_config.check_duplicate_keys(str(path))
    (tmp_path / "ok.yaml").write_text("a: &x {b: 1}\nc: {<<: *x, d: 2}\n")  # merge keys are not duplicates
    fm_config.check_duplicate_keys(str(tmp_path / "ok.yaml"))


def test_every_config_error_is_raised_from_the_config_package():
    """One home for config checks: the plan derives, the stages read settings; only forgetmap.config
    raises ConfigError (a check elsewhere would be a second place to look for what a key allows)."""
    import ast

    package = REPO / "workflow" / "forgetmap"
    raisers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and node.exc is not None:
                call = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if getattr(call, "id", getattr(call, "attr", None)) == "ConfigError":
                    raisers.add(path.relative_to(package).parts[0])
    assert raisers == {"config"}


def test_a_forecast_task_is_fine_tuned_but_not_a_row_of_the_matrix():
    raw = minimal()
    raw["tasks"].update(job_qa={"category": "w"}, add_qa={"category": "w", "forecast": True},
                        mul_qa={"category": "w", "forecast": "check"})
    raw["prediction"] = {"splits": {"s": {"test": ["city_qa"]}}}
    raw["mitigation"] = mitigation(tasks=["city_qa", "add_qa"])
    plan = Plan(raw)
    assert plan.tasks["m"] == ["city_qa", "job_qa", "mul_qa"]  # measured: the matrix's rows
    assert plan.finetuned["m"] == ["city_qa", "job_qa", "add_qa", "mul_qa"]
    assert plan.forecast.modes("m") == {"add_qa": "forecast", "mul_qa": "check"}
    assert plan.forecast.fit_tasks("m") == ["city_qa", "job_qa"]  # neither forecast task fits its own forecast
    assert "results/m/scores/add_qa/shard-0.parquet" not in plan.all_scores("m")
    assert plan.mitigation.replay_inputs("m", "p", "add_qa")["forecast"] == "results/m/forecast/forecast.parquet"
    assert "forecast" not in plan.mitigation.replay_inputs("m", "p", "city_qa")  # a split predicts it
    assert "results/m/forecast/summary.tsv" in plan.targets()
    listed = minimal()
    listed["tasks"].update(job_qa={"category": "w"}, add_qa={"category": "w"})
    listed["models"]["m"]["forecast"] = ["add_qa"]  # the model's list marks it for that model alone
    assert Plan(listed).forecast.modes("m") == {"add_qa": "forecast"}


def test_only_a_forecast_tasks_fine_tune_is_monitored_and_waits_for_the_probes():
    raw = minimal()
    raw["tasks"].update(job_qa={"category": "w"}, add_qa={"category": "w", "forecast": True},
                        mul_qa={"category": "w", "forecast": "check"})
    raw["models"]["m"]["finetune"] = {"monitor": {"every": 10, "at": [0.25]}}
    plan = Plan(raw)
    assert set(plan.forecast.monitored("m")) == {"add_qa", "mul_qa"}
    assert plan.finetune_inputs("m", "mul_qa")["probes"] == "results/m/forecast/probes.parquet"
    assert "probes" not in plan.finetune_inputs("m", "city_qa")
    monitor = plan.finetune_settings("m", "mul_qa")["monitor"]
    items = monitor.pop("items")  # the corpus has items decided by their options: k of them watched too
    assert monitor == {"every": 10, "at": [0.25], "chat_template": "auto", "max_length": 2048, "token_budget": 16384}
    assert items["k"] == 30 and items["asked"]["metric"] == "acc" and items["asked"]["chat_template"] == "auto"
    assert plan.finetune_inputs("m", "mul_qa")["shards"] == plan.shard_paths("m")  # where they are drawn from
    assert plan.forecast.trajectory_inputs("m")["transitions"] == "results/m/correctness/transitions.parquet"
    assert plan.forecast.probes_settings("m")["items"] == {"k": 30, "seed": 0, "generated": False}
    assert items["generated"] is False  # the monitored fine-tune draws the same items (multiple choice alone)
    # a measured task's settings carry no monitor key: turning the monitor on reruns no measured fine-tune
    assert "monitor" not in plan.finetune_settings("m", "city_qa")
    assert "monitor" not in Plan(minimal()).finetune_settings("m", "city_qa")
    # the probes read the fit rows' score files, not the matrix (mul_qa is a matrix row and needs them first)
    inputs = plan.forecast.probes_inputs("m")
    assert "matrix" not in inputs and "results/m/scores/mul_qa/shard-0.parquet" not in inputs["scores"]
    assert "results/m/scores/job_qa/shard-0.parquet" in inputs["scores"]
    assert plan.forecast.probes_settings("m")["rows"]["tasks"] == ["city_qa", "job_qa"]
    assert "results/m/forecast/trajectory.tsv" in plan.targets()
    assert plan.forecast.trajectory_inputs("m")["checkpoints"] == ["results/m/checkpoints/add_qa",
                                                                  "results/m/checkpoints/mul_qa"]
    # a monitored fine-tune's last check is its probe values: no probe scoring job
    assert plan.forecast.forecast_inputs("m")["scores"] == ["results/m/checkpoints/add_qa",
                                                            "results/m/checkpoints/mul_qa"]
    with pytest.raises(ConfigError, match="config key tasks.job_qa.finetune.monitor: task 'job_qa' is measured"):
        fm_config.resolve({**raw, "tasks": {**raw["tasks"], "job_qa": {"category": "w",
                                                                        "finetune": {"monitor": {"every": 5}}}}})
    unforecast = minimal()
    unforecast["models"]["m"]["finetune"] = {"monitor": {"every": 10}}
    with pytest.raises(ConfigError, match="config key models.m.finetune.monitor: model 'm' has no forecast task"):
        fm_config.resolve(unforecast)
    raw["models"]["m"]["finetune"]["processes"] = 2
    raw["models"]["m"]["resources"] = {"finetune": {"gpu": 0}}  # gloo processes on the CPU
    sharded = Plan(raw)  # a monitored fine-tune may be sharded (FSDP): its ranks score in step
    assert sharded.finetune_settings("m", "add_qa")["processes"] == 2 and "monitor" in sharded.finetune_settings("m", "add_qa")


def test_a_logged_row_named_as_a_scored_run_of_another_model_is_an_error():
    base = {"upstream": "u", "base": {"kind": "pretrained", "path": "models/base"}, "tasks": []}
    config = {"upstream": {"u": {"format": "parquet", "path": "u.parquet"}}, "categories": {"sft": {}},
              "models": {"a": {**base, "checkpoints": {"sft": {"path": "models/sft", "category": "sft"}}},
                         "b": {**base, "checkpoints": {"sft": {"logs": {"files": ["logs/*.jsonl"]}, "category": "sft"}}}}}
    with pytest.raises(ConfigError, match=r"config key models.b.checkpoints.sft: a row from evaluation logs needs a "
                                          r"name that no model scores"):
        fm_config.resolve(config)
