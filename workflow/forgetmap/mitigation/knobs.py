"""An arm's knobs: the strengths of its training changes, and the sweep over one of them in one job.

The knobs are the learning rate `lr`, `l2_sp` (λ), `kl_base` (β), `ema` (decay), `train_top` (blocks
trained) and the LoRA rank `lora.r`; `train_modules` and `lora.target_modules` choose where. A knob given as a list is swept: the
arm's job fine-tunes once per value, one after another in one process (no process per value), and every
value is judged; at most one knob of an arm is a list. `fine_tunes` expands an arm's settings into its
fine-tunes; `arm_hooks` turns one fine-tune's arm into the training loop's hooks (forgetmap.mitigation.hooks),
freezing first, then the anchors, EMA last (it averages the weights the others trained).
"""

from __future__ import annotations

import math

KNOBS = ("lr", "l2_sp", "kl_base", "ema", "train_top", "lora.r")


ARENA = ("lr", "lora", "l2_sp", "kl_base", "train_top", "train_modules", "ema")


def compact(arm: dict) -> dict:
    """The arm without the arena's keys it leaves unset (`targets: original`, `generation` where nothing
    generates): a job's settings hold what it uses, and an arm written before the arena keeps its settings
    (its jobs do not rerun when forgetmap learns new methods)."""
    out = {k: v for k, v in arm.items() if not (k in ARENA and v is None)}
    if out.get("targets") == "original":
        del out["targets"]
    if not generates(out):
        out.pop("generation", None)
    return out


def generates(arm: dict) -> bool:
    """Does the arm write training text with the base model (self-generated replay, SDFT)?"""
    return arm.get("replay") == "self_generated" or arm.get("targets") == "sdft"


def knob_value(arm: dict, knob: str):
    """The arm's value of `knob` (`lora.r` inside its `lora`), None where it does not set it."""
    if knob == "lora.r":
        return (arm.get("lora") or {}).get("r")
    return arm.get(knob)


def knob_values(arm: dict, knob: str) -> list:
    """The values the arm gives `knob`: its list, [its value], or [] where it does not set it."""
    value = knob_value(arm, knob)
    return list(value) if isinstance(value, list) else [] if value is None else [value]


def swept(arm: dict) -> tuple[str | None, list]:
    """(the knob the arm sweeps or else the one it sets, its values); (None, [None]) for an arm without one."""
    for knob in KNOBS:
        if isinstance(knob_value(arm, knob), list):
            return knob, knob_values(arm, knob)
    for knob in KNOBS:
        if knob_value(arm, knob) is not None:
            return knob, knob_values(arm, knob)
    return None, [None]


def fine_tunes(settings: dict) -> list[tuple[str | None, float, dict]]:
    """(knob, value, settings) of every fine-tune an arm's job runs: one per value of its swept knob, with
    the arm's LoRA as the fine-tuning method where it names one. The value is NaN for an arm without a knob."""
    arm = settings.get("arm") or {}
    knob, values = swept(arm)
    runs = []
    for value in values:
        one = {**arm}
        if knob == "lora.r":
            one["lora"] = {**one["lora"], "r": value}
        elif knob is not None:
            one[knob] = value
        run = {**settings, "arm": one}
        if one.get("lr") is not None:
            run["lr"] = one["lr"]
        if one.get("lora"):
            run.update(method="lora", lora={**settings["lora"], **one["lora"]})
        runs.append((knob, math.nan if value is None else float(value), run))
    return runs


def label(knob: str | None, value: float) -> str:
    """A fine-tune's name inside its arm (its checkpoint's directory within a sweep): `l2_sp-0.1`."""
    return "plain" if knob is None else f"{knob}-{value:g}"


def arm_hooks(settings: dict):
    """The hooks of one fine-tune's arm (an empty `Hooks` for plain fine-tuning and the other arms)."""
    from .hooks import Hooks

    arm = settings.get("arm") or {}
    hooks = []
    if arm.get("train_top") is not None or arm.get("train_modules"):
        from .freezing import Freeze

        hooks.append(Freeze(arm.get("train_top"), arm.get("train_modules")))
    if arm.get("l2_sp"):
        from .anchors import L2SP

        hooks.append(L2SP(float(arm["l2_sp"])))
    if arm.get("kl_base"):
        from .anchors import KLToBase

        hooks.append(KLToBase(float(arm["kl_base"])))
    if arm.get("ema") is not None:
        from .ema import EMA

        hooks.append(EMA(float(arm["ema"])))
    return Hooks(hooks)
