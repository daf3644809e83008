"""What the demo's forgetting matrix teaches: low rank beyond a null, categories, negative entries.

    python benchmarks/demo_matrix.py [results/demo/forgetting.parquet]
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd

from forgetmap.correlate import category_summary, cross_task
from forgetmap.lowrank import r2_by_rank, row_shuffled_null
from forgetmap.matrix import ForgettingMatrix


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "results/demo/forgetting.parquet"
    m = ForgettingMatrix.read(path)
    z = m.values.astype(np.float64)
    summary = category_summary(cross_task(z, m.tasks, m.task_categories())).set_index("pairs")
    within, across = (summary.loc[p, "pearson_column_centred"] for p in ("within category", "across categories"))
    by_domain = pd.DataFrame(z.T, columns=m.tasks).groupby(m.sources).mean().T.round(2)
    print(json.dumps({
        "shape": list(m.shape), "mean": round(float(z.mean()), 4), "std": round(float(z.std()), 4),
        "share_negative": round(float((z < 0).mean()), 4),
        "r2_rank_1_to_8": np.round(r2_by_rank(z, 8), 3).tolist(),
        "r2_row_shuffled_null": np.round(r2_by_rank(row_shuffled_null(z), 8), 3).tolist(),
        "row_corr_within_category": round(within, 3), "row_corr_across_categories": round(across, 3),
        "p_within_vs_across": round(float(summary.loc["within - across", "p_value"]), 4),
    }))
    print(by_domain.to_string())


if __name__ == "__main__":
    main()
