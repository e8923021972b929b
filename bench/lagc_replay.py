"""LAGC against SAGC and static G by learning signal per hour: an offline replay of the
synchronous pipeline, until the simulator's pipelines pass rewards to controllers.

A synchronous step's timing depends only on its step index and G (the engine is empty
at every step start; lengths are keyed on (seed, step, prompt, sample)), so every
candidate G is simulated once with :class:`StaticG` on the SimPy engine (lengths, generation
time, step time per step); a controller is then replayed step by step on those tables,
fed through :func:`sim.control.observation.observe_step` with Bernoulli rewards. Pass rates:
``p_i ~ Beta(A, B)`` per prompt id (recurring with ``--dataset-size``), rewards keyed on
(seed, step, prompt, sample) so sample j is the same whatever G; no learning (p fixed).
Check printed first: the replayed SAGC wall clock equals a direct SimPy run's.

Signal, realised per hour: ``var/h`` = sum over groups of the population variance of the
group's rewards (``s_i`` of :mod:`sim.models.learning`, LAGC ``signal=variance``, the default);
``inf/h`` = sum over groups of ``1[not homogeneous] (1 - 1/G)`` (``signal=informative``).

Usage: python bench/lagc_replay.py [--steps 300] [--prompts 16] [--beta 0.6,1.4]
       [--dataset-size N] [--controller static:4,static:8,static:16,sagc,lagc]
"""

from __future__ import annotations

import argparse

import numpy as np
from rolloutlab.sim.control.controllers import StaticG, split_specs
from rolloutlab.sim.control.observation import observe_step, propose_step
from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.sim.models.dynamics import prompt_ids_for
from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
from rolloutlab.sim.scenario.bundled import DEFAULT_SCENARIO
from rolloutlab.sim.scenario.scenario import load_scenario
from rolloutlab.sim.studies.compare import sagc_defaults
from rolloutlab.sim.trace.metrics import DEFAULT_TAU, straggler_ratio


def tables(scenario, cfg: RunConfig, Gs: list[int]) -> dict[int, tuple]:
    """Per G: lengths (T, B, G), generation time (T,) and step time (T,) in seconds."""
    out = {}
    for G in Gs:
        rollouts, steps = run_sync(scenario, StaticG(G), cfg)
        r = rollouts.sort(["step", "prompt_id", "sample_idx"])
        lengths = r["response_tokens"].to_numpy().reshape(cfg.steps, cfg.prompts, G)
        step_s = (steps["t_end"] - steps["t_start"]).to_numpy()
        out[G] = (lengths, steps["gen_time"].to_numpy(), step_s)
    return out


def replay(
    ctl, tab: dict[int, tuple], cfg: RunConfig, p_of, seed: int, tau: float
) -> dict[str, float]:
    """Run ``ctl`` on the tables; returns wall clock (h), mean G, informative fraction,
    straggler rate (max/median > ``tau``) and the two realised signals per hour."""
    clock = signal = var_signal = informative = groups = G_sum = stragglers = 0.0
    g_max = max(tab)
    for t in range(cfg.steps):
        ids = prompt_ids_for(t, cfg.prompts, cfg.dataset_size)
        G = propose_step(ctl, ids)
        lengths, gen, step = tab[G][0][t], tab[G][1][t], tab[G][2][t]
        u = np.random.default_rng([seed, 2, t]).random((cfg.prompts, g_max))[:, :G]
        rewards = (u < p_of(ids)[:, None]).astype(np.float64)
        observe_step(
            ctl, lengths, rewards=rewards, prompt_ids=ids, gen_time_s=gen, step_time_s=step
        )
        inf = rewards.min(axis=1) != rewards.max(axis=1)
        clock += step
        stragglers += straggler_ratio(lengths) > tau
        signal += inf.sum() * (1 - 1 / G)
        var_signal += rewards.var(axis=1).sum()
        informative += inf.sum()
        groups += cfg.prompts
        G_sum += G
    return {
        "wall_h": clock / 3600,
        "mean_G": G_sum / cfg.steps,
        "informative_frac": informative / groups,
        "straggler_rate": stragglers / cfg.steps,
        "inf_per_h": signal / (clock / 3600),
        "var_per_h": var_signal / (clock / 3600),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=DEFAULT_SCENARIO)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--beta", default="0.6,1.4", help="A,B of the pass-rate Beta")
    ap.add_argument("--dataset-size", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--controller", default="static:4,static:8,static:16,sagc,lagc")
    args = ap.parse_args()
    a, b = (float(x) for x in args.beta.split(","))
    scenario = load_scenario(args.scenario)
    cfg = RunConfig(
        steps=args.steps, prompts=args.prompts, seed=args.seed, dataset_size=args.dataset_size
    )
    specs = split_specs(args.controllers)
    make = [parse_controller(s, seed=args.seed, **sagc_defaults(scenario)) for s in specs]
    sagc = parse_controller("sagc", args.seed, **sagc_defaults(scenario))  # for the check
    Gs = [g for c in [*make, sagc] for g in (c.candidates if hasattr(c, "candidates") else [c.G])]
    Gs = sorted(set(Gs))
    tab = tables(scenario, cfg, Gs)

    def p_of(ids: np.ndarray) -> np.ndarray:
        return np.array([np.random.default_rng([args.seed, 1, int(i)]).beta(a, b) for i in ids])

    tau = float(sagc_defaults(scenario).get("tau", DEFAULT_TAU))
    direct = run_sync(scenario, parse_controller("sagc", args.seed, **sagc_defaults(scenario)), cfg)
    check = replay(sagc, tab, cfg, p_of, 0, tau)
    direct_h = float((direct[1]["t_end"].max() - direct[1]["t_start"].min()) / 3600)
    print(f"check: sagc direct wall_h={direct_h:.4f} replayed wall_h={check['wall_h']:.4f}")
    print(
        f"scenario={args.scenario} steps={args.steps} prompts={args.prompts} "
        f"pass_rate=beta:{a},{b} dataset_size={args.dataset_size}"
    )
    head = ("wall_h", "mean_G", "inf_frac", "strag", "var/h", "inf/h")
    print(f"{'controller':<28}" + "".join(f"{h:>9}" for h in head))
    for spec, ctl in zip(specs, make):
        r = replay(ctl, tab, cfg, p_of, args.seed, tau)
        print(
            f"{spec:<28} {r['wall_h']:>8.2f} {r['mean_G']:>8.2f} {r['informative_frac']:>8.3f} "
            f"{r['straggler_rate']:>8.3f} {r['var_per_h']:>8.2f} {r['inf_per_h']:>8.1f}"
        )


if __name__ == "__main__":
    main()
