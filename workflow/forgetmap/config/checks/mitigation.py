"""Mitigation: arms whose keys make sense together, their tasks, the held-out set."""

from __future__ import annotations

from ...errors import ConfigError
from ...mitigation.knobs import ARENA
from ..views import model_tasks


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
    from ...mitigation.knobs import KNOBS, generates, knob_value

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
    from ...predict.registry import method_class

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
