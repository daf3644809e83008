"""The building blocks of every section: an object of keys, a number, an integer, a choice, a job's resources."""

from __future__ import annotations


NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


def obj(properties: dict, required: tuple = (), description: str = "", **extra) -> dict:
    schema = {"type": "object", "properties": properties, "additionalProperties": False, **extra}
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


def number(default, description: str, minimum=None, exclusive_minimum=None, kind="number") -> dict:
    schema = {"type": kind, "default": default, "description": description}
    if minimum is not None:
        schema["minimum"] = minimum
    if exclusive_minimum is not None:
        schema["exclusiveMinimum"] = exclusive_minimum
    return schema


def integer(default, description: str, minimum=None) -> dict:
    return number(default, description, minimum=minimum, kind="integer")


def choice(default, values, description: str) -> dict:
    return {"enum": list(values), "default": default, "description": description}


def resources(gpu: int, mem_mb: int | None, runtime: int | None, threads: int, what: str) -> dict:
    return obj({
        "gpu": integer(gpu, f"GPUs per {what} job (Snakemake resource `gpu`; SLURM --gpus)", 0),
        "mem_mb": integer(mem_mb, f"memory per {what} job in MB", 1) if mem_mb is not None else {
            "type": ["integer", "null"], "minimum": 1, "default": None,
            "description": f"memory per {what} job in MB; null: forgetmap.memory's estimate of its host memory (its "
                           f"processes' own, and on a CPU the whole fine-tune), 10 % added, at least 4,000"},
        "runtime": integer(runtime, f"wall-clock minutes per {what} job", 1) if runtime is not None else {
            "type": ["integer", "null"], "minimum": 1, "default": None,
            "description": f"wall-clock minutes per {what} job (SLURM --time), x the attempt on a retry; null: "
                           f"forgetmap.cost's estimate of the longest such job from its work and the rates measured "
                           f"on its device, x1.5 and 5 minutes more (the dry run prints each job's estimate)"},
        "threads": integer(threads, f"CPU threads per {what} job; torch uses exactly this many", 1),
        "gpu_memory_gib": {"type": ["number", "null"], "exclusiveMinimum": 0, "default": None,
                           "description": f"memory of each GPU a {what} job runs on, in GiB (nvidia-smi's MiB / 1024: "
                                          f"79.6 for an 80 GB H100); given, a job the memory estimate says cannot fit "
                                          f"is refused when the run is planned; null: not known before the job runs"},
    }, description=f"resources of each {what} job", default={})
