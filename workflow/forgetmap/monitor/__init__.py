"""Watching forgetting while a fine-tune runs: a forecast map of the base model (`ForecastMap`), the probes
scored on live weights (`ProbeMeter`), and the trainer callback that forecasts every upstream example's
forgetting at each check (`ForgettingMonitor`).

    from forgetmap.monitor import ForgettingMonitor
    ForgettingMonitor("results/olmo/forecast/map.parquet", budget=0.3).attach(trainer)

The callback is imported only when asked for (it imports transformers' trainer callbacks).
"""

from .map import ForecastMap

__all__ = ["ForecastMap", "ForgettingMonitor", "ProbeMeter"]


def __getattr__(name):
    if name == "ForgettingMonitor":
        from .callback import ForgettingMonitor

        return ForgettingMonitor
    if name == "ProbeMeter":
        from .meter import ProbeMeter

        return ProbeMeter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
