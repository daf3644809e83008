"""Online replay (the paper's "partition" runs, §6.3): predict the task's forgetting while training on it.

Phase A trains the first `warmup` share of the steps on the task mixed with random replay. Then, inside
the job, the batch source measures the forgetting of `probes` upstream examples (drawn at random, or
chosen by `probe_selection` from the split's train rows: forgetmap.predict.probes) (their NLL under the
model being trained minus their NLL under the initial weights, both with the training tokenisation),
folds that partial row into the completion method fitted on the split's train tasks, draws the
predicted replay examples (softmax(prediction / T), without replacement, from the pool less the held-out
set and the examples phase A replayed: the paper meant to exclude those and did not), and continues with
the task mixed with them. The task's data order and the learning-rate schedule continue: phase B's
stream is the mixture's seeded stream with its first phase-A steps skipped, as the paper's sampler does.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

from ..data.chat import Encoded
from ..data.upstream import read_ids, read_rows
from .replay import mixture_batches, select_replay

log = logging.getLogger(__name__)

PROBE_SEED = 1  # the draw of an arm's probes (random, or the seed of a design's tie-breaks): fixed, as the matrix's k


class OnlineReplay:
    """A batch source: phase A's mixture, then — once, at `switch_step` — the measured, completed and
    drawn phase B mixture. `facts` records what happened (probe forgetting, seconds, replayed)."""

    def __init__(self, model, tokenizer, task_examples: list[Encoded], phase_a: list[Encoded], phase_a_ids,
                 settings: dict, online: dict, total_steps: int):
        from ..io import read_metadata
        from ..matrix import ForgettingMatrix
        from ..models import autocast_for
        from ..meter import ProbeMeter
        from ..predict.protocol import prepare_split
        from ..predict.registry import make_method, parameters

        arm = settings["arm"]
        self.model, self.tokenizer, self.settings, self.arm = model, tokenizer, settings, arm
        self.task_examples, self.micro = task_examples, settings["grad_accum"]
        self.switch_step = max(1, int(arm["warmup"] * total_steps))
        self.phase_a = mixture_batches(task_examples, phase_a, settings["batch_size"], self.micro, settings["seed"])
        self.step = 0
        self.facts: dict = {"switch_step": self.switch_step}
        # everything that needs no trained weights happens now, before training starts
        started = time.perf_counter()
        matrix = ForgettingMatrix.read(online["matrix"])
        split = json.loads(Path(online["split"]).read_text())
        usable, _, _, train_z, _ = prepare_split(matrix.values, matrix.tasks, split["train_tasks"],
                                                 [arm["task"]], arm["probes"], split["name"])
        params = dict(arm["params"])
        if "threshold" in parameters(arm["method"]):
            params.setdefault("threshold", arm["threshold"])
        self.method = make_method(arm["method"], **params).fit(train_z)
        self.usable = usable  # matrix columns the completion knows (no NaN in any train row)
        self.shards = online["shards"]
        self.ids = read_ids(self.shards)
        if not np.array_equal(self.ids, matrix.example_ids):
            raise ValueError(f"{online['matrix']}: its examples are not the upstream shards': rebuild it")
        open_to_replay = np.ones(len(self.ids), dtype=bool)
        open_to_replay[np.asarray(read_metadata(online["heldout"])["indices"], dtype=int)] = False
        open_to_replay[np.isin(self.ids, np.asarray(phase_a_ids, dtype=str))] = False
        candidates = self.pool = np.flatnonzero(open_to_replay)
        # probes: usable, not held out (they are measured, never judged on), chosen as `probe_selection` says
        probe_candidates = np.intersect1d(usable, candidates)
        count = min(arm["probes"], len(probe_candidates))
        strategy = arm["probe_selection"]
        if strategy == "random":
            rng = np.random.default_rng(PROBE_SEED)
            self.probes = np.sort(rng.choice(probe_candidates, count, replace=False))
        else:
            from ..predict.probes import choose_probes, design

            phi, ridge, noise = design(train_z)  # over the usable columns, from the split's train rows
            positions = np.flatnonzero(np.isin(usable, probe_candidates))
            chosen = choose_probes(strategy, len(positions), count, PROBE_SEED, phi[positions], ridge,
                                   noise[positions])
            self.probes = np.sort(usable[positions[chosen]])
        self.facts["probe_selection"] = strategy
        # in training's precision (fp32 weights under bf16 autocast on a GPU: a flash-attention kernel
        # refuses fp32 outside it); under FSDP the ranks score their batches in step (forgetmap.meter)
        device = next(model.parameters()).device
        self.meter = ProbeMeter.for_rows(model, tokenizer, read_rows(self.shards, self.probes), settings["chat_template"],
                                         settings["max_length"], token_budget=16384,
                                         autocast=lambda: autocast_for(device, settings["bf16"]))
        self.base_probe_nll = self.meter.measure()
        self.n_replay = len(phase_a)
        self.facts["setup_seconds"] = round(time.perf_counter() - started, 3)

    def _switch(self):
        """Measure, complete, draw; return phase B's stream positioned after phase A's steps."""
        from ..data.chat import encode_examples

        started = time.perf_counter()
        forgetting = self.meter.measure() - self.base_probe_nll
        known = np.searchsorted(self.usable, self.probes)  # probe columns in the completion's index
        row = self.method.predict(known[None, :], forgetting[None, :])[0]
        scores = np.full(len(self.ids), np.nan)
        scores[self.usable] = row
        chosen = select_replay(self.n_replay, self.pool, self.settings["seed"] + 1000, scores[self.pool],
                               self.arm["temperature"], self.arm["selection"])
        replay_b = encode_examples(self.tokenizer, read_rows(self.shards, chosen), self.settings["chat_template"],
                                   self.settings["max_length"])
        self.facts.update(online_seconds=round(time.perf_counter() - started, 3),
                          probe_forgetting=round(float(np.nanmean(forgetting)), 6), replayed_online=len(chosen),
                          replayed_online_ids=self.ids[chosen].tolist(), probe_ids=self.ids[self.probes].tolist())
        log.info("online replay at step %d: probe forgetting %.4f, %d examples drawn in %.3f s", self.step,
                 self.facts["probe_forgetting"], len(chosen), self.facts["online_seconds"])
        stream = mixture_batches(self.task_examples, replay_b, self.settings["batch_size"], self.micro,
                                 self.settings["seed"])
        for _ in range(self.switch_step):  # the task's order continues where phase A left it
            next(stream)
        return stream

    def __iter__(self):
        return self

    def __next__(self):
        if self.step == self.switch_step:
            self.phase_a = self._switch()
        self.step += 1
        return next(self.phase_a)
