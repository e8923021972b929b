"""SAGC under the step-level and the per-group straggler reading at a large batch.

At ``B x G`` in the thousands the step-level ratio ``max/median`` over all the step's
rollouts exceeds any usual ``tau`` at every G, so ``S_t = 1`` at every step and SAGC's
constraint carries no information about G. The per-group reading (the group straggler
share against a level, :func:`sim.trace.metrics.straggler_reading`) stays informative.
This script prints, for one scenario at ``B`` prompts and SAGC's candidates 4/8/16:

1. the straggler rates by G and tau (step-level rate over steps; mean group share), from
   the scenario's length model (:func:`sim.control.tau.rate_table`);
2. the tau chosen from the length model (:func:`sim.control.tau.choose_tau`: the tau at
   which the middle candidate's rate equals delta, in each reading);
3. one simulated run per SAGC setting (fast engine, synchronous): the share of steps at
   each G, the rate of ``S_t`` as the controller read it, mean G and wall clock per step.

Writes OUT/table.md. Usage:
    python bench/straggler_readings.py [--scenario longcot] [--prompts 512]
        [--steps 200] [--delta 0.3] [--seed 0] [--out runs/straggler_readings]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from rolloutlab.sim.control.controllers import SAGC
from rolloutlab.sim.control.tau import choose_tau, rate_table
from rolloutlab.sim.pipelines.registry import simulate
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import load_scenario

CANDIDATES = (4, 8, 16)


def run_one(scenario, ctl: SAGC, cfg: RunConfig) -> dict:
    """One run: share of steps per G, rate of S_t as read, mean G, seconds per step."""
    steps = simulate(scenario, ctl, cfg, engine="fast").steps.sort("step")
    reasons = [json.loads(r) for r in steps["controller_reason"].to_list()]
    s_t = [r["observed"]["S_t"] for r in reasons if r.get("observed")]
    G = np.array([r["observed"]["G"] for r in reasons if r.get("observed")])
    wall = float(steps["t_end"].max() - steps["t_start"].min())
    return {
        **{f"G={g}": float(np.mean(G == g)) for g in CANDIDATES},
        "S_t rate": float(np.mean(s_t)),
        "mean G": float(G.mean()),
        "s/step": wall / steps.height,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", default="longcot")
    p.add_argument("--prompts", type=int, default=512)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--delta", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/straggler_readings")
    a = p.parse_args()
    sc = load_scenario(a.scenario)
    B, mid = a.prompts, CANDIDATES[len(CANDIDATES) // 2]
    lines = [
        f"scenario {a.scenario}, B = {B}, SAGC candidates {CANDIDATES}, delta = {a.delta}, "
        f"{a.steps} steps, seed {a.seed}",
        "",
        "Straggler rates from the length model (32 drawn steps):",
        "",
        "| G | tau | step-level rate | group straggler share |",
        "|---|---|---|---|",
    ]
    default_tau = sc.run_defaults.tau
    taus = sorted({2.0, 4.0, default_tau})
    for r in rate_table(sc.lengths, list(CANDIDATES), B, taus, seed=a.seed):
        lines.append(f"| {r['G']} | {r['tau']:g} | {r['step_rate']:.2f} | {r['group_share']:.3f} |")
    tau_g = choose_tau(sc.lengths, mid, B, a.delta, "group", seed=a.seed)
    tau_s = choose_tau(sc.lengths, mid, B, a.delta, "step", seed=a.seed)
    lines += [
        "",
        f"tau chosen at G = {mid} (rate = delta = {a.delta}): group reading {tau_g:.2f}, "
        f"step reading {tau_s:.2f}",
        "",
        "| SAGC reading | tau | level | "
        + " | ".join(f"G={g}" for g in CANDIDATES)
        + " | S_t rate | mean G | s/step |",
        "|---" * (6 + len(CANDIDATES)) + "|",
    ]
    cfg = RunConfig(steps=a.steps, prompts=B, seed=a.seed)
    settings = [
        ("step", default_tau, None),
        ("step", round(tau_s, 2), None),
        ("group", round(tau_g, 2), a.delta),
    ]
    for reading, tau, level in settings:
        kw = {"level": level} if level is not None else {}
        ctl = SAGC(
            candidates=CANDIDATES, tau=tau, delta=a.delta, reading=reading, seed=a.seed, **kw
        )
        r = run_one(sc, ctl, cfg)
        lines.append(
            f"| {reading} | {tau:g} | {'-' if level is None else level} | "
            + " | ".join(f"{r[f'G={g}']:.2f}" for g in CANDIDATES)
            + f" | {r['S_t rate']:.2f} | {r['mean G']:.2f} | {r['s/step']:.0f} |"
        )
        print(lines[-1], flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out / 'table.md'}")


if __name__ == "__main__":
    main()
