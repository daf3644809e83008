"""The prediction jobs' plan: each model's splits, the methods it runs, and what each predict job reads."""

from __future__ import annotations

from .. import config as fm_config
from .paths import PREDICTION_METRICS, PREDICTION_SCORES, PROBES, SIMILARITY, SPLIT


class PredictionPlan:
    def __init__(self, plan):
        self.plan = plan
        self.cfg = plan.cfg
        self._splits = {model: self._model_splits(model) for model in plan.models}
        for model in plan.computed:
            if self._splits[model]:  # a model without splits predicts nothing: k is never used
                fm_config.checks.check_known_counts(self.cfg, model, plan.n_upstream(model))

    def splits(self, model: str) -> dict[str, dict]:
        """The model's prediction splits: configured (computed models) or released (imported ones)."""
        return self._splits[model]

    def split_settings(self, model: str, split: str) -> dict:
        return self._splits[model][split]

    def released_split(self, model: str, split: str) -> str:
        return self._splits[model][split]["released"]

    def split_of(self, model: str, chosen: str | None, task: str) -> str | None:
        """The split predicting `task`: `chosen` if it has the task as a test task, or with none chosen the
        first split that has (None if none has)."""
        splits = self._splits[model]
        if chosen is not None:
            return chosen if task in splits.get(chosen, {}).get("test_tasks", ()) else None
        return next((name for name, split in splits.items() if task in split["test_tasks"]), None)

    def methods(self, model: str) -> list[str]:
        """The configured methods; `semantic` only where the model's texts give it a similarity matrix."""
        semantic = self.plan.task_correlations(model) and self.cfg["models"][model]["correlations"]["semantic"]
        return [m for m in self.cfg["prediction"]["methods"] if m != "semantic" or semantic]

    # --- jobs ----------------------------------------------------------------------------------------

    def predict_settings(self, method: str) -> dict:
        options = {k: self.cfg["prediction"][k] for k in ("k", "seeds", "threshold", "top_q", "budget", "probes",
                                                          "intervals")}
        return {**options, "method": method, "params": self.cfg["prediction"]["methods"][method]}

    def predict_similarity(self, model: str, method: str) -> list[str]:
        """The semantic method's side information: the tasks' similarity to the upstream examples."""
        return [SIMILARITY.format(model=model)] if method == "semantic" else []

    def metrics(self, model: str) -> list[str]:
        """Every (split, method) metrics table the model's prediction scores gather."""
        return [PREDICTION_METRICS.format(model=model, split=s, method=m)
                for s in self._splits[model] for m in self.methods(model)]

    def probe_evaluation_settings(self) -> dict:
        """The strategies, ks and draws compared, with the method's parameters and the metric options."""
        prediction = self.cfg["prediction"]
        evaluation = prediction["probe_evaluation"]
        return {**{k: prediction[k] for k in ("threshold", "top_q", "budget", "intervals")}, **evaluation,
                "reference_k": evaluation["reference_k"] or prediction["k"],
                "params": prediction["methods"][evaluation["method"]]}

    # --- targets -------------------------------------------------------------------------------------

    def split_targets(self, model: str) -> list[str]:
        return [SPLIT.format(model=model, split=s) for s in self._splits[model]]

    def targets(self, model: str) -> list[str]:
        if not self._splits[model]:
            return []
        return [PREDICTION_SCORES.format(model=model)] + [PROBES.format(model=model, split=s) for s in self._splits[model]]

    # --- deriving the splits -------------------------------------------------------------------------

    def _model_splits(self, model: str) -> dict[str, dict]:
        spec = self.cfg["models"][model]["imported"]
        if spec is not None:
            return {name: {"name": name, "released": path} for name, path in spec["splits"].items()}
        rows = self.plan.tasks[model] if model in self.plan.z_models else self.plan.y_rows(model)
        return prediction_splits(self.cfg, {t: self.plan.categories[model][t] for t in rows})


def prediction_splits(cfg: dict, categories: dict[str, str]) -> dict[str, dict]:
    """Train and test rows of each configured split, restricted to a model's rows (`categories`: row ->
    category, tasks and checkpoints alike; the config's checks made sure every split names rows,
    categories and in-domain splits that exist). A split is the model's only where it has both train and test
    rows among them: a map of checkpoints beside a fine-tuned model has none of the latter's test tasks."""
    tasks = list(categories)
    splits: dict[str, dict] = {}
    configured = cfg["prediction"]["splits"]
    for name, split in configured.items():  # in-domain splits first: out-of-domain ones refer to them
        if split["test"] is not None:
            test = [t for t in tasks if t in split["test"]]
            tested = {categories[t] for t in test}
            train = [t for t in tasks if categories[t] in tested and t not in test]
            splits[name] = {"name": name, "train_tasks": train, "test_tasks": test}
    for name, split in configured.items():
        if split["test"] is None:
            test = [t for t in tasks if categories[t] == split["test_category"]]
            splits[name] = {"name": name, "train_tasks": splits[split["train_split"]]["train_tasks"], "test_tasks": test}
    return {name: splits[name] for name in configured if splits[name]["train_tasks"] and splits[name]["test_tasks"]}
