"""The explorer at paper scale: page size, build time and load time in headless Chromium.

A generated 85 × 141,871 matrix (rank 5 plus noise, 7 sources) over a generated corpus of plain texts of
pretraining documents' lengths (20 to 1,500 words); the page built as the workflow builds it
(`forgetmap.explorer`), then opened in headless Chromium (Debian's chromium + chromium-driver) until it
says it is drawn. With `--workdir`, the demo's
own page is opened the same way.

    python benchmarks/explorer_scale.py                          # paper scale
    python benchmarks/explorer_scale.py --workdir . --model demo # the demo's page, after the demo
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def generated(directory: Path, tasks: int, n: int, seed: int = 0):
    from forgetmap.matrix import ForgettingMatrix

    rng = np.random.default_rng(seed)
    sources = np.array(["web", "code", "books", "wiki", "papers", "dialog", "quiz"])[rng.integers(0, 7, n)]
    ids = np.array([f"{s}-{i:06d}" for i, s in enumerate(sources)])
    z = (rng.normal(size=(tasks, 5)) @ rng.normal(size=(5, n)) * 0.2 + rng.normal(size=(tasks, n)) * 0.1)
    categories = {f"task{t:02d}": f"cat{t % 6}" for t in range(tasks)}
    matrix = ForgettingMatrix(z.astype(np.float32), list(categories), ids, sources,
                              rng.uniform(1, 4, n).astype(np.float32), categories)
    words = np.array("the of and to in a is that for it as was with be by on not he this are or his from".split())
    lengths = rng.integers(20, 1500, n)  # words: pretraining documents of up to ~2,048 tokens, as Dolma's
    shard = directory / "shard-0.parquet"
    pd.DataFrame({"example_id": ids, "source": sources, "kind": "lm",
                  "text": [" ".join(words[rng.integers(0, len(words), k)]) for k in lengths]}).to_parquet(shard)
    return matrix, [str(shard)]


def load_seconds(page: Path, repeats: int = 3) -> list[float]:
    from browser import chromium, console_errors, wait_ready

    driver = chromium()
    try:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            driver.get(page.as_uri())
            wait_ready(driver, timeout=300)
            times.append(round(time.perf_counter() - start, 2))
        errors = console_errors(driver)
        if errors:
            raise RuntimeError(f"console errors: {errors[:3]}")
        return times
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=85)
    parser.add_argument("--examples", type=int, default=141_871)
    parser.add_argument("--workdir", default=None, help="open this finished run's explorer instead")
    parser.add_argument("--model", default="demo")
    args = parser.parse_args()
    if args.workdir:
        page = (Path(args.workdir) / f"results/{args.model}/explorer.html").resolve()
        print(json.dumps({"page": str(page), "bytes": page.stat().st_size, "load_s": load_seconds(page)}))
        return
    from forgetmap.explorer import build, render

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        matrix, shards = generated(tmp, args.tasks, args.examples)
        settings = {"model": "paper-scale", "categories": matrix.categories, "modes": {}, "top_forgotten": 50,
                    "top_improved": 20, "components": 3, "component_tasks": 8, "component_examples": 20,
                    "top_protected": 10, "columns": 240}
        start = time.perf_counter()
        data = build(matrix, shards, settings)
        page = tmp / "explorer.html"
        page.write_text(render(data), encoding="utf-8")
        built = time.perf_counter() - start
        print(json.dumps({"tasks": args.tasks, "examples": args.examples, "carried": data["carried"],
                          "bytes": page.stat().st_size, "build_s": round(built, 2), "load_s": load_seconds(page)}))


if __name__ == "__main__":
    main()
