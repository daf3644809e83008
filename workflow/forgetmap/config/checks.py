"""Every check of a config, section by section; each error names the key, the value and what is allowed.

`resolve` (the package) runs the checks a config alone decides. A few need facts read from the data
(the corpus's size, whether its examples carry answers, a model's splits): the plan reads those and
calls the checks here, so a bad config still fails before any job, and from one place.
"""

from __future__ import annotations

import contextlib

from ..errors import ConfigError, ForgetmapError
from ..mitigation.knobs import ARENA
from .views import finetune_settings, fit_tasks, forecast_modes, model_tasks

RESERVED_RUNS = ("base", "example_id", "source", "base_nll")  # run names and matrix label columns


@contextlib.contextmanager
def about(key: str):
    """Reading what `key` points at: a missing or unreadable file becomes a ConfigError naming the key."""
    try:
        yield
    except ConfigError:
        raise
    except (ForgetmapError, OSError, ValueError) as exc:
        raise ConfigError(f"config key {key}: {exc}") from None


# --- files --------------------------------------------------------------------------------------------

def check_duplicate_keys(path: str) -> None:
    """A YAML mapping that names one key twice keeps only the last value (PyYAML, and so Snakemake, say
    nothing): an error naming the file, the key and both lines."""
    import yaml

    class Strict(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges; it names no key
                continue
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(f"{path}: line {key_node.start_mark.line + 1}: key {key!r} is given twice in one "
                                  f"mapping (first at line {seen[key] + 1}); YAML would keep only the last")
            seen[key] = key_node.start_mark.line
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    with open(path) as handle:
        yaml.load(handle, Loader=Strict)


# --- upstream, tasks, models -------------------------------------------------------------------------

def check_upstream(cfg: dict) -> None:
    """Each corpus names its source; its answer extraction has a pattern that compiles where it needs one."""
    for name, corpus in cfg["upstream"].items():
        check_extraction(f"upstream.{name}.answers", corpus["answers"])
        for source, own in corpus["answers"]["sources"].items():
            check_extraction(f"upstream.{name}.answers.sources.{source}", own)
        if corpus["format"] == "hf":
            if not corpus["dataset"] and not corpus["parts"]:
                raise ConfigError(f"config key upstream.{name}.dataset: required for format 'hf' (or `parts`)")
            continue
        if corpus["format"] != "demo" and not corpus["path"]:
            raise ConfigError(f"config key upstream.{name}.path: required for format {corpus['format']!r}")


def check_extraction(key: str, spec: dict) -> None:
    """An extractor `regex` has a pattern, and a pattern compiles."""
    import re

    if spec.get("extract") == "regex" and not spec.get("pattern"):
        raise ConfigError(f"config key {key}.pattern: required for extract 'regex'")
    if spec.get("pattern"):
        try:
            re.compile(spec["pattern"])
        except re.error as exc:
            raise ConfigError(f"config key {key}.pattern: value {spec['pattern']!r} is not a regular expression: "
                              f"{exc}") from None


def check_tasks(cfg: dict) -> None:
    """Each task has a usable name, a configured category and a source."""
    from ..data.demo import TASKS as DEMO_TASKS

    for name, task in cfg["tasks"].items():
        if name in RESERVED_RUNS:
            raise ConfigError(f"config key tasks.{name}: the name {name!r} is reserved for the base model's scores")
        if task["category"] not in cfg["categories"]:
            raise ConfigError(f"config key tasks.{name}.category: value {task['category']!r} is not a category; "
                              f"allowed: {', '.join(cfg['categories'])}")
        if task["format"] == "hf":
            if not task["dataset"]:
                raise ConfigError(f"config key tasks.{name}.dataset: required for format 'hf'")
            continue
        if task["path"] is None and name not in DEMO_TASKS:
            raise ConfigError(f"config key tasks.{name}.path: no file given and {name!r} is not a demo task; "
                              f"demo tasks: {', '.join(sorted(DEMO_TASKS))}")


def check_models(cfg: dict) -> None:
    """Each computed model names a corpus, configured tasks, a base, and a scorer that fits its fine-tuning
    method; its fine-tuning processes fit the method and the GPUs."""
    for name, model in cfg["models"].items():
        if model["imported"] is not None:
            continue
        if model["upstream"] is None:
            raise ConfigError(f"config key models.{name}.upstream: required unless models.{name}.imported is set")
        if model["upstream"] not in cfg["upstream"]:
            raise ConfigError(f"config key models.{name}.upstream: value {model['upstream']!r} is not an upstream "
                              f"corpus; allowed: {', '.join(cfg['upstream'])}")
        if model["tasks"] != "all":
            unknown = [t for t in model["tasks"] if t not in cfg["tasks"]]
            if unknown:
                raise ConfigError(f"config key models.{name}.tasks: value {unknown[0]!r} is not a task; "
                                  f"allowed: {', '.join(cfg['tasks'])}")
        if model["base"]["kind"] == "pretrained" and not model["base"]["path"]:
            raise ConfigError(f"config key models.{name}.base.path: required when base.kind is 'pretrained'")
        sampling = model["score"]["correctness"]
        if sampling["answers"] == "sampled" and sampling["temperature"] == 0 and sampling["seeds"] > 1:
            raise ConfigError(f"config key models.{name}.score.correctness.seeds: value {sampling['seeds']} seeds at "
                              f"temperature 0 give the same greedy answer {sampling['seeds']} times; set one seed or a "
                              f"temperature above 0")
        if model["score"]["backend"] == "vllm" and model["finetune"]["method"] == "lora":
            raise ConfigError(f"config key models.{name}.score.backend: vllm scores full checkpoints, and "
                              f"models.{name}.finetune.method is lora; use backend torch (it merges the adapter)")
        lora_tasks = [t for t in model_tasks(cfg, name) if (cfg["tasks"][t]["finetune"] or {}).get("method") == "lora"]
        if model["score"]["backend"] == "vllm" and lora_tasks:
            raise ConfigError(f"config key tasks.{lora_tasks[0]}.finetune.method: lora, and models.{name}.score.backend "
                              f"is vllm, which scores full checkpoints only; use backend torch")
        check_checkpoints(cfg, name)
        if not model_tasks(cfg, name) and not model["checkpoints"]:
            raise ConfigError(f"config key models.{name}.tasks: model {name!r} has no row: no task is configured for it "
                              f"and it names no checkpoints")
        for task in model_tasks(cfg, name):
            check_processes(finetune_settings(cfg, name, task), model["resources"]["finetune"]["gpu"],
                            f"models.{name} / tasks.{task}")
    check_logged_names(cfg)


def check_logged_names(cfg: dict) -> None:
    """A row imported from eval logs has a name no model scores: its score files come from another rule."""
    computed = {n: m for n, m in cfg["models"].items() if m["imported"] is None}
    scored = {r for n, m in computed.items()
              for r in [*model_tasks(cfg, n), *(c for c, s in m["checkpoints"].items() if s["logs"] is None)]}
    for name, model in computed.items():
        for row, checkpoint in model["checkpoints"].items():
            if checkpoint["logs"] is not None and row in scored:
                raise ConfigError(f"config key models.{name}.checkpoints.{row}: a row from evaluation logs needs a "
                                  f"name that no model scores ({row!r} is scored elsewhere)")


def check_checkpoints(cfg: dict, model: str) -> None:
    """A model's checkpoints: names that are not runs already, configured categories, references that are
    the base or an earlier link of an acyclic chain, a pretrained base to compare with, and a prompt that
    is either a chat template (zero-shot) or plain few-shot text."""
    spec = cfg["models"][model]
    checkpoints = spec["checkpoints"]
    if checkpoints and spec["base"]["kind"] != "pretrained":
        raise ConfigError(f"config key models.{model}.checkpoints: checkpoints are compared with a pretrained base; "
                          f"set models.{model}.base.kind: pretrained and base.path (the checkpoints' base model)")
    for name, checkpoint in checkpoints.items():
        key = f"config key models.{model}.checkpoints.{name}"
        if name in RESERVED_RUNS or name in cfg["tasks"]:
            what = "a task's name" if name in cfg["tasks"] else "reserved"
            raise ConfigError(f"{key}: the name {name!r} is {what}: a checkpoint's row needs a name of its own")
        if checkpoint["category"] not in cfg["categories"]:
            raise ConfigError(f"{key}.category: value {checkpoint['category']!r} is not a category; allowed: "
                              f"{', '.join(cfg['categories'])}")
        if (checkpoint["path"] is None) == (checkpoint["logs"] is None):
            raise ConfigError(f"{key}: give `path` (a model to score) or `logs` (evaluation logs to import), "
                              f"one of them")
        logs = checkpoint["logs"]
        if logs is not None and logs["align"] == "id" and not logs["id"]:
            raise ConfigError(f"{key}.logs.id: required for align 'id' (a template giving the example_id, e.g. "
                              f"'{{doc[id]}}')")
        if checkpoint["reference"] != "base" and checkpoint["reference"] not in checkpoints:
            raise ConfigError(f"{key}.reference: value {checkpoint['reference']!r} is neither `base` nor a checkpoint "
                              f"of model {model!r}; allowed: base, {', '.join(c for c in checkpoints if c != name)}")
        if checkpoint["shots"] and checkpoint["chat_template"] == "tokenizer":
            raise ConfigError(f"{key}.shots: value {checkpoint['shots']}: few-shot prompts are plain text, and "
                              f"chat_template is `tokenizer` (a chat model prompted zero-shot); set chat_template: "
                              f"auto (or olmo) for a few-shot row")
        seen, at = [name], checkpoint["reference"]
        while at != "base":
            if at in seen:
                raise ConfigError(f"{key}.reference: the chain {' -> '.join([*seen, at])} is a cycle; a chain ends at "
                                  f"`base`")
            seen.append(at)
            at = checkpoints[at]["reference"]


def check_logs(cfg: dict, model: str, files: dict[str, list[list[str]]], has_items: bool) -> None:
    """Logged rows (`files`: row -> each seed's files): every seed's glob matches files, the corpus has items
    to align them with, and a row pairs seed by seed with its reference (a scored run has the model's
    sampling seeds, or one)."""
    spec = cfg["models"][model]
    correctness = spec["score"]["correctness"]
    scored_seeds = correctness["seeds"] if correctness["answers"] == "sampled" else 1
    for name, seeds in files.items():
        key = f"config key models.{model}.checkpoints.{name}.logs"
        if not has_items:
            raise ConfigError(f"{key}: the upstream corpus {spec['upstream']!r} has no item with an answer to align "
                              f"logged items with")
        for pattern, found in zip(spec["checkpoints"][name]["logs"]["files"], seeds):
            if not found:
                raise ConfigError(f"{key}.files: {pattern!r} matches no file")
        reference = spec["checkpoints"][name]["reference"]
        theirs = len(files[reference]) if reference in files else scored_seeds
        if len(seeds) != theirs:
            raise ConfigError(f"{key}.files: {len(seeds)} seed(s), and its reference {reference!r} has {theirs}: seed s "
                              f"is compared with seed s (models.{model}.score.correctness gives scored runs "
                              f"{scored_seeds})")


def check_checkpoint_files(cfg: dict, model: str, templates: dict[str, bool], tokenizers: dict[str, str | None]) -> None:
    """What a model's checkpoint files must give (read by the plan): a chat template where a row is prompted
    through it, and, for a per-token Z, the same tokenizer as the row's reference (`tokenizers`: run ->
    the digest of how it splits text, read where Z is per token)."""
    spec = cfg["models"][model]
    for name, checkpoint in spec["checkpoints"].items():
        if name not in templates:  # an eval log: no files of a model
            continue
        if checkpoint["chat_template"] == "tokenizer" and not templates[name]:
            raise ConfigError(f"config key models.{model}.checkpoints.{name}.chat_template: `tokenizer`, and "
                              f"{checkpoint['path']!r} has no chat template (a base model?); set chat_template: auto "
                              f"and shots (few-shot, as base models are prompted)")
        reference = checkpoint["reference"]
        if spec["z"] == "nats_per_token" and reference in tokenizers and tokenizers[name] != tokenizers[reference]:
            raise ConfigError(f"config key models.{model}.z: nats_per_token, and checkpoint {name!r} "
                              f"({checkpoint['path']}) splits text into other tokens than its reference {reference!r}: "
                              f"a per-token NLL change across tokenizers compares different units; set "
                              f"models.{model}.z: bits_per_byte (the NLL per byte of the scored text)")


def check_processes(settings: dict, gpus: int, where: str) -> None:
    """Several training processes shard full fine-tuning (FSDP), one per GPU."""
    processes = settings["processes"]
    if processes > 1 and settings["method"] != "full":
        raise ConfigError(f"config key finetune.processes ({where}): value {processes} needs method 'full' "
                          f"(FSDP shards full fine-tuning); a {settings['method']} run fits one device")
    if gpus and gpus != processes:
        raise ConfigError(f"config key resources.finetune.gpu ({where}): value {gpus} must equal finetune.processes "
                          f"({processes}): each training process drives one GPU")


# --- prediction ---------------------------------------------------------------------------------------

def check_methods(prediction: dict) -> None:
    """Every parameter under `prediction.methods.NAME` is one the method takes; the probe evaluation's
    method is a configured one without side information."""
    from ..predict.registry import PROVIDED, parameters

    methods = prediction["methods"]
    for name, params in methods.items():
        allowed = parameters(name) if params else {}
        for key in params:
            if key in PROVIDED or key not in allowed:
                raise ConfigError(f"config key prediction.methods.{name}.{key}: {name} has no such parameter; "
                                  f"allowed: {', '.join(allowed) or 'none'}")
    method = prediction["probe_evaluation"]["method"]
    if method not in methods or method == "semantic":
        raise ConfigError(f"config key prediction.probe_evaluation.method: value {method!r} is not a configured "
                          f"prediction method without side information; allowed: "
                          f"{', '.join(m for m in methods if m != 'semantic')}")


def check_splits(cfg: dict) -> None:
    """Each split is in-domain (`test` tasks) or out-of-domain (`test_category` and an in-domain
    `train_split`), naming tasks, categories and splits that exist."""
    splits = cfg["prediction"]["splits"]
    for name, split in splits.items():
        key = f"config key prediction.splits.{name}"
        if split["test"] is not None:
            rows = [*cfg["tasks"], *(c for m in cfg["models"].values() for c in m.get("checkpoints") or {})]
            unknown = [t for t in split["test"] if t not in rows]
            if unknown:
                raise ConfigError(f"{key}.test: value {unknown[0]!r} is not a task or checkpoint; allowed: "
                                  f"{', '.join(rows)}")
            continue
        if split["test_category"] is None or split["train_split"] is None:
            raise ConfigError(f"{key}: give `test` (in-domain) or `test_category` and `train_split` (out-of-domain)")
        if split["test_category"] not in cfg["categories"]:
            raise ConfigError(f"{key}.test_category: value {split['test_category']!r} is not a category; "
                              f"allowed: {', '.join(cfg['categories'])}")
        in_domain = [s for s, spec in splits.items() if spec["test"] is not None]
        if split["train_split"] not in in_domain:
            raise ConfigError(f"{key}.train_split: value {split['train_split']!r} is not an in-domain split; "
                              f"allowed: {', '.join(in_domain) or 'none'}")


def check_known_counts(cfg: dict, model: str, n_examples: int) -> None:
    """The known examples of a test task (`prediction.k`, `correctness.k`, the probe evaluation's reference
    k) must leave something to predict among the model's upstream examples: a config error before any job,
    not a failing predict job beside probe tables written anyway."""
    prediction = cfg["prediction"]
    counts = {"prediction.k": prediction["k"], "correctness.k": cfg["correctness"]["k"],
              "prediction.probe_evaluation.reference_k": prediction["probe_evaluation"]["reference_k"]}
    for key, k in counts.items():
        if k is not None and k >= n_examples:
            raise ConfigError(f"config key {key}: value {k} known examples leave nothing to predict: model {model!r} "
                              f"has {n_examples} upstream examples")


# --- forecast -----------------------------------------------------------------------------------------

def check_forecast(cfg: dict) -> None:
    """Forecast tasks are tasks of a computed model, completed by a configured regression method without
    side information, fitted on at least two measured tasks that are not forecast themselves."""
    from ..predict.registry import method_class

    forecasting = False
    for name, model in cfg["models"].items():
        listed = model.get("forecast") or []
        if model["imported"] is not None:
            if listed:
                raise ConfigError(f"config key models.{name}.forecast: model {name!r} is imported: it fine-tunes "
                                  f"nothing to forecast")
            continue
        own = model_tasks(cfg, name)
        unknown = [t for t in listed if t not in own]
        if unknown:
            raise ConfigError(f"config key models.{name}.forecast: value {unknown[0]!r} is not a task of model "
                              f"{name!r}; allowed: {', '.join(own)}")
        modes = forecast_modes(cfg, name)
        if not modes:
            continue
        forecasting = True
        for row in modes:
            checkpoint = model["checkpoints"].get(row)
            if checkpoint is None:
                continue
            key = f"config key models.{name}.checkpoints.{row}.forecast"
            if checkpoint["path"] is None:
                raise ConfigError(f"{key}: a row from evaluation logs has nothing to score on the probes")
            if checkpoint["reference"] != "base" or model["z"] != "nats_per_token":
                raise ConfigError(f"{key}: a forecast completes Z against the base in nats per token; this row "
                                  f"is compared with {checkpoint['reference']!r} and models.{name}.z is {model['z']}")
        fit = fit_tasks(cfg, name)
        if len(fit) < 2:
            first = next(iter(modes))
            key = f"models.{name}.forecast" if first in listed else (
                f"models.{name}.checkpoints.{first}.forecast" if first in model["checkpoints"] else f"tasks.{first}.forecast")
            raise ConfigError(f"config key {key}: model {name!r} has {len(fit)} measured task(s) that are not "
                              f"forecast ({', '.join(fit) or 'none'}); a forecast is fitted on at least 2")
    method = cfg["forecast"]["method"]
    methods = cfg["prediction"]["methods"]
    if forecasting:
        if method not in methods:
            raise ConfigError(f"config key forecast.method: value {method!r} is not a configured prediction method; "
                              f"allowed: {', '.join(methods)}")
        if method == "semantic" or not getattr(method_class(method), "regression", True):
            raise ConfigError(f"config key forecast.method: {method!r} cannot serve a forecast (a ranking score or "
                              f"side information); a forecast needs mean, additive, knn or mf")


def check_forecast_count(cfg: dict, model: str, n_examples: int) -> None:
    """The probes must leave something to forecast among the model's upstream examples."""
    k = cfg["forecast"]["k"]
    if k >= n_examples:
        raise ConfigError(f"config key forecast.k: value {k} probes leave nothing to forecast: model {model!r} has "
                          f"{n_examples} upstream examples")


def check_explorer(cfg: dict) -> None:
    """The explorer's method is a known completion method (shown where it is also configured)."""
    from ..predict.registry import METHODS

    method = cfg["explorer"]["method"]
    if method not in METHODS:
        raise ConfigError(f"config key explorer.method: value {method!r} is not a prediction method; allowed: "
                          f"{', '.join(METHODS)}")


# --- mitigation ---------------------------------------------------------------------------------------

# the arm keys each part of an arm reads: a key given for a part the arm does not have is a mistake
ARM_KEYS = {
    "replay": {"ratio"},
    "weighted": {"temperature", "selection"},  # every replay drawn by scores (not random)
    "predicted": {"method", "split", "prediction_seed", "statistic", "risk", "risk_level"},
    "ground_truth": {"statistic"},
    "online": {"method", "split", "probes", "probe_selection", "warmup"},
    "stm": {"stm_mode", "tau", "q"},
    "self_generated": {"generation"},
    "sdft": {"generation"},
}
ARENA_KEYS = set(ARENA)  # any arm may add these


def check_arm_keys(name: str, arm: dict) -> None:
    """Every key an arm's config gives is one its replay, token and weight settings read (silently
    ignoring, say, `temperature` on random replay or `tau` without STM hides a mistake)."""
    if not isinstance(arm, dict):
        return  # the schema says what is wrong
    replay = arm.get("replay", "none")
    read = {"replay", "tokens", "weights", "targets", *ARENA_KEYS}
    if replay != "none":
        read |= ARM_KEYS["replay"] | ARM_KEYS.get(replay, set())
        if replay not in ("random", "self_generated"):  # drawn uniformly: no scores to weight
            read |= ARM_KEYS["weighted"]
    if arm.get("targets", "original") == "sdft":
        read |= ARM_KEYS["sdft"]
    if arm.get("tokens", "none") != "none":
        read |= ARM_KEYS["stm"]
    for key in arm:
        if key not in read:
            users = [part for part, keys in ARM_KEYS.items() if key in keys]
            raise ConfigError(f"config key mitigation.arms.{name}.{key}: not used by this arm (replay: {replay}, "
                              f"tokens: {arm.get('tokens', 'none')}, weights: {arm.get('weights', 'none')}); it "
                              f"applies to {', '.join(users) or 'no arm'}")


def check_mitigation_tasks(cfg: dict, model: str, splits: dict) -> None:
    """`mitigation.tasks` names a prediction split of the model, or tasks the model is fine-tuned on."""
    tasks = cfg["mitigation"]["tasks"]
    if isinstance(tasks, dict):
        if tasks["split"] not in splits:
            raise ConfigError(f"config key mitigation.tasks.split: value {tasks['split']!r} is not a prediction split; "
                              f"allowed: {', '.join(splits) or 'none'}")
    elif tasks is not None:
        own = model_tasks(cfg, model)
        unknown = [t for t in tasks if t not in own]
        if unknown:
            raise ConfigError(f"config key mitigation.tasks: value {unknown[0]!r} is not a task of model {model!r}; "
                              f"allowed: {', '.join(own)}")


def check_heldout(cfg: dict, model: str, n_upstream: int) -> None:
    """The held-out set is a count or a share below 1 that leaves a replay pool."""
    size = cfg["mitigation"]["heldout"]
    if size >= 1 and size != int(size):
        raise ConfigError(f"config key mitigation.heldout: value {size} is neither a count nor a share below 1")
    count = int(round(size * n_upstream)) if size < 1 else int(size)
    if count >= n_upstream:
        raise ConfigError(f"config key mitigation.heldout: value {size} leaves no replay pool: the upstream "
                          f"corpus of model {model!r} has {n_upstream} examples")


def check_arms(cfg: dict, model: str, tasks: list[str], splits: dict, arm_splits: dict, has_items: bool,
               forecast: dict[str, str] | None = None) -> None:
    """Each arm can run on the model: what it reads exists (a configured method, a split predicting each
    of its tasks or else its forecast, Y where it replays by P(Y = 1), intervals where it is risk-aware, a
    measured row for ground truth). `arm_splits` maps (arm, task) to the split whose prediction the arm
    reads for the task (None: no split predicts it); `forecast`: the model's forecast tasks and modes."""
    forecast = forecast or {}
    unmeasured = [task for task in tasks if forecast.get(task) == "forecast"]
    for arm, spec in cfg["mitigation"]["arms"].items():
        key = f"config key mitigation.arms.{arm}"
        processes = cfg["models"][model]["finetune"]["processes"]
        _check_arena_arm(key, spec, model, processes)
        if spec["replay"] == "online" and processes > 1:
            raise ConfigError(f"{key}.replay: online replay measures the model inside one training process; "
                              f"models.{model}.finetune.processes is {processes}")
        if spec["statistic"] == "forgotten_1to0":
            _check_binary_arm(cfg, model, key, spec, has_items)
        if spec["risk"]:
            _check_risk_arm(cfg, key, spec)
        if spec["replay"] == "ground_truth" and unmeasured:
            raise ConfigError(f"{key}.replay: ground_truth reads the measured row, and task {unmeasured[0]!r} is "
                              f"only forecast (tasks.{unmeasured[0]}.forecast: check measures it too)")
        if spec["replay"] not in ("predicted", "online"):
            continue
        if spec["statistic"] == "loss" and spec["method"] not in cfg["prediction"]["methods"]:
            raise ConfigError(f"{key}.method: value {spec['method']!r} is not a configured prediction method; "
                              f"allowed: {', '.join(cfg['prediction']['methods'])}")
        if spec["split"] is not None and spec["split"] not in splits:
            raise ConfigError(f"{key}.split: value {spec['split']!r} is not a prediction split; allowed: "
                              f"{', '.join(splits) or 'none'}")
        forecast_read = [task for (name, task), split in arm_splits.items() if name == arm and split is None
                         and task in forecast and spec["replay"] == "predicted" and spec["statistic"] == "loss"]
        if forecast_read and spec["method"] != cfg["forecast"]["method"]:
            raise ConfigError(f"{key}.method: value {spec['method']!r}, but task {forecast_read[0]!r} is read from its "
                              f"forecast, which forecast.method ({cfg['forecast']['method']!r}) completes")
        outside = [task for (name, task), split in arm_splits.items()
                   if name == arm and split is None and task not in forecast_read]
        if outside:
            where = f"split {spec['split']!r}" if spec["split"] else "any prediction split"
            raise ConfigError(f"{key}: task {outside[0]!r} is not a test task of {where}: its forgetting "
                              f"was never predicted (a forecast task serves predicted replay of the loss only)")
        if spec["prediction_seed"] >= cfg["prediction"]["seeds"]:
            raise ConfigError(f"{key}.prediction_seed: value {spec['prediction_seed']} is not below "
                              f"prediction.seeds ({cfg['prediction']['seeds']})")


def _check_arena_arm(key: str, spec: dict, model: str, processes: int) -> None:
    """One swept knob at most, one way of choosing the trained part, and one training process: the anchors,
    EMA and freezing hold their copies and choices in the process that trains (not under FSDP)."""
    from ..mitigation.knobs import KNOBS, generates, knob_value

    lists = [knob for knob in KNOBS if isinstance(knob_value(spec, knob), list)]
    if len(lists) > 1:
        raise ConfigError(f"{key}: knobs {' and '.join(lists)} are both lists; an arm sweeps one knob (make another "
                          f"arm for the other)")
    if spec["train_top"] is not None and spec["train_modules"]:
        raise ConfigError(f"{key}.train_modules: give train_top or train_modules, not both")
    if spec["targets"] == "sdft" and (spec["tokens"] != "none" or spec["weights"] != "none"):
        raise ConfigError(f"{key}.targets: SDFT rewrites the responses that token masks and example weights are "
                          f"computed on; use it without tokens/weights")
    used = [k for k in ARENA_KEYS - {"lr"} if spec.get(k) not in (None, [], {})]
    if generates(spec):  # named by the key that makes it generate
        used.append("replay" if spec["replay"] == "self_generated" else "targets")
    if used and processes > 1:
        raise ConfigError(f"{key}.{sorted(used)[0]}: the arena's training changes run in one training process; "
                          f"models.{model}.finetune.processes is {processes}")


def _check_binary_arm(cfg: dict, model: str, key: str, spec: dict, has_items: bool) -> None:
    """An arm replaying by P(Y = 1) needs Y (items with an answer) and, predicted, a Y predictor."""
    if spec["replay"] not in ("predicted", "ground_truth"):
        raise ConfigError(f"{key}.statistic: forgotten_1to0 scores predicted or ground_truth replay, not "
                          f"{spec['replay']!r}")
    if not has_items:
        raise ConfigError(f"{key}.statistic: forgotten_1to0 needs upstream items with an answer; the upstream "
                          f"corpus of model {model!r} has none")
    methods = cfg["correctness"]["methods"]
    if spec["replay"] == "predicted" and spec["method"] not in methods:
        raise ConfigError(f"{key}.method: value {spec['method']!r} is not a configured predictor of Y; allowed "
                          f"(correctness.methods): {', '.join(methods)}")


def _check_risk_arm(cfg: dict, key: str, spec: dict) -> None:
    """Risk-aware replay reads the conformal half-widths a regression method's prediction wrote."""
    from ..predict.registry import method_class

    if spec["replay"] != "predicted" or spec["statistic"] != "loss":
        raise ConfigError(f"{key}.risk: risk-aware replay needs replay: predicted on the loss statistic")
    levels = cfg["prediction"]["intervals"]
    if spec["risk_level"] not in levels:
        raise ConfigError(f"{key}.risk_level: value {spec['risk_level']} is not one of prediction.intervals "
                          f"({', '.join(map(str, levels)) or 'none'})")
    if spec["method"] in cfg["prediction"]["methods"] and (
            not getattr(method_class(spec["method"]), "regression", True) or spec["method"] == "semantic"):
        raise ConfigError(f"{key}.method: {spec['method']!r} writes no intervals (a ranking score or side "
                          f"information); risk-aware replay needs mean, additive, knn or mf")
