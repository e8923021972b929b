"""Speed of multi-turn rollouts in the SimPy engine, as a ratio against single-turn
rollouts of the same scenario in the same process (docs/multi_turn.md).

Runs the bundled ``agentic_tools`` scenario (sync pipeline, static G) with its
``multi_turn`` block and without it (every rollout one turn), and prints the simulated
turns per second of each and ``turn_cost_over_single``: the wall time per simulated turn
of the multi-turn run over that per rollout of the single-turn run (a later turn is a
one-request batch and a SimPy process for its tool call, so it costs more than a turn 0
submitted with its whole step).

    python bench/multi_turn_speed.py [--steps 20] [--group-size 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from rolloutlab.sim.control.spec import parse_controller
from rolloutlab.sim.pipelines.registry import simulate
from rolloutlab.sim.pipelines.sync import RunConfig
from rolloutlab.sim.scenario.scenario import load_scenario


def main() -> None:
    """Parse arguments, run both, print ``key=value`` lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    sc = load_scenario("agentic_tools")
    cfg = RunConfig(steps=args.steps, prompts=int(sc.defaults["prompts"]))
    runs = {}
    for scenario in (dataclasses.replace(sc, multi_turn=None), sc):  # warm-up (imports, caches)
        simulate(
            scenario,
            parse_controller(f"static:{args.group_size}"),
            dataclasses.replace(cfg, steps=1),
        )
    for name, scenario in (("single", dataclasses.replace(sc, multi_turn=None)), ("multi", sc)):
        walls = []
        for _ in range(args.repeats):  # best of: the machine may be shared
            t0 = time.perf_counter()
            res = simulate(scenario, parse_controller(f"static:{args.group_size}"), cfg)
            walls.append(time.perf_counter() - t0)
        wall = min(walls)
        turns = res.turns.height if res.turns is not None else res.rollouts.height
        runs[name] = (wall, turns)
        print(
            f"{name}_turns={turns} {name}_wall_s={wall:.2f} {name}_turns_per_s={turns / wall:,.0f}"
        )
    (w1, n1), (w2, n2) = runs["single"], runs["multi"]
    print(f"turn_cost_over_single={(w2 / n2) / (w1 / n1):.2f}")


if __name__ == "__main__":
    main()
