"""Watching forgetting while a fine-tune runs: a forecast map of the base model (`ForecastMap`), the probes
scored on live weights (`ProbeMeter`), and the trainer callback that forecasts every upstream example's
forgetting at each check (`ForgettingMonitor`).

    from forgetmap.monitor import ForgettingMonitor
    ForgettingMonitor("results/olmo/forecast/map.parquet", budget=0.15).attach(trainer)

With `replay=ForecastReplay(upstream)` the monitor also steers a replay of the examples forecast most
forgotten, mixed into the trainer's training set. The callback and the replay are imported only when asked
for (they import transformers' trainer callbacks and torch).
"""

from .map import ForecastMap

__all__ = ["ForecastMap", "ForecastReplay", "ForgettingMonitor", "ProbeMeter"]


def __getattr__(name):
    if name == "ForgettingMonitor":
        from .callback import ForgettingMonitor

        return ForgettingMonitor
    if name == "ForecastReplay":
        from .replay import ForecastReplay

        return ForecastReplay
    if name == "ProbeMeter":
        from ..meter import ProbeMeter

        return ProbeMeter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
