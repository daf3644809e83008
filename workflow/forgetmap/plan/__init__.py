"""What each job gets: its files, inputs, settings and resources, decided in one place per kind of job.

- `paths`: where every file lives (templates with Snakemake wildcards);
- `core`: `Plan(config)`, the models, their runs, shards and tasks, and the jobs that measure forgetting
  (data, base, fine-tune, score, matrix, imports, analyses) and the default targets;
- `prediction`, `mitigation`, `correctness`: the later stages' jobs, reached as `plan.prediction`,
  `plan.mitigation`, `plan.correctness`.

Each method a rule calls takes the rule's wildcards by name, so the rule files are wiring. The plan
only derives: every check of the config lives in `forgetmap.config`.
"""

from .core import Plan
from .paths import *  # noqa: F401,F403 (the path templates the rules wire)
from .paths import alternatives

__all__ = ["Plan", "alternatives"]
