# forgetmap: which upstream examples a language model forgets when fine-tuned on each of many tasks.
# Default target: every configured model's forgetting matrix and its analyses. The default config is
# the embedded demo; forgetmap.plan decides every job, the rule files only wire files to commands.

from snakemake.utils import min_version

min_version("9.0")


# --configfile replaces the demo config instead of being merged into it
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


# every rule is a Python process: fix its hash seed so set and dict orders never vary
shell.prefix("export PYTHONHASHSEED=0; ")



include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/models.smk"
include: "rules/scores.smk"
include: "rules/imported.smk"
include: "rules/lowrank.smk"
include: "rules/correlations.smk"
include: "rules/prediction.smk"
include: "rules/forecast.smk"
include: "rules/mitigation.smk"
include: "rules/correctness.smk"
include: "rules/explorer.smk"
include: "rules/cost.smk"


onstart:
    # known only now that the run is starting (not a dry run): is it local, and are the GPUs there?
    if workflow.local_exec:
        try:
            fm_preflight.check_gpus(PLAN)
        except ForgetmapError as exc:
            raise WorkflowError(f"forgetmap: {exc}") from None
        # its jobs forked from one process that has imported what they import (forgetmap.warm)
        WARM.append(fm_warm.start(PLAN, "results/logs/warm-start.log"))


onsuccess:
    fm_warm.stop(WARM and WARM.pop())


onerror:
    fm_warm.stop(WARM and WARM.pop())


rule all:
    input:
        PLAN.targets(),
    default_target: True
