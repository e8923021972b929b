"""Writes the synthetic group-per-line fixture of this folder (see SOURCE.md)."""

import json

import numpy as np

rng = np.random.default_rng(44)
for step in (1, 2, 3):
    lines = []
    for rank in range(4):  # 2 data-parallel ranks x 2 tensor-parallel ranks
        dp, tp = rank // 2, rank % 2
        for local in range(4):
            lengths = np.ceil(np.exp(rng.normal(4.0 + 0.2 * step, 0.6, 4))).astype(int)
            lines.append(
                {
                    "step": step,
                    "rank": rank,
                    "dp_rank": dp,
                    "tp_rank": tp,
                    "local_index": local,
                    "input": int(rng.integers(60, 200)),
                    "output": lengths.tolist(),
                    "n_sampling": 4,
                    "validate": False,
                }
            )
    # tp_rank 1 logs the same groups as tp_rank 0 of its data-parallel rank
    by_key = {(r["dp_rank"], r["local_index"]): r for r in lines if r["tp_rank"] == 0}
    for r in lines:
        if r["tp_rank"] == 1:
            r["output"], r["input"] = (
                by_key[(r["dp_rank"], r["local_index"])]["output"],
                by_key[(r["dp_rank"], r["local_index"])]["input"],
            )
    lines.append(
        {
            "step": step,
            "rank": 0,
            "dp_rank": 0,
            "tp_rank": 0,
            "local_index": 0,
            "input": 99,
            "output": [7],
            "n_sampling": 1,
            "validate": True,
        }
    )
    with open(f"packed_lengths_step_{step}.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in lines)
