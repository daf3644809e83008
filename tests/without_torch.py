"""Snakemake, run with torch, transformers, accelerate and peft made impossible to import (each import raises
ImportError and is listed on stderr as `import refused: NAME from FILE:LINE`): `python tests/without_torch.py ARGS`
is `snakemake ARGS` in a process that must plan without them."""

import runpy
import sys
import traceback

REFUSED = ("torch", "transformers", "accelerate", "peft")


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            caller = next((f for f in reversed(traceback.extract_stack()[:-1]) if "importlib" not in f.filename),
                          None)
            print(f"import refused: {name} from {caller.filename}:{caller.lineno}" if caller else
                  f"import refused: {name}", file=sys.stderr)
            raise ImportError(f"{name} is refused in this test")
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, Refuse())
    sys.argv = ["snakemake", *sys.argv[1:]]
    runpy.run_module("snakemake", run_name="__main__")
