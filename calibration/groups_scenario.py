"""The calibration file of ``calibrate groups``: lengths fitted on a grouped per-sample
trace (:mod:`calibration.groups_fit`, or the observed groups themselves), cost and engine
of another scenario (a per-sample trace holds no timing), provenance."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from rolloutlab.calibration.grouped import GroupedTrace
from rolloutlab.calibration.groups_fit import fit_groups
from rolloutlab.calibration.passrate_fit import GroupedSamples, pass_rate_block
from rolloutlab.calibration.writer import calibration_dict, source_entry
from rolloutlab.sim.scenario import load_scenario


def grouped_samples(trace: GroupedTrace) -> GroupedSamples | None:
    """The pass-rate fitter's input (:class:`calibration.passrate_fit.GroupedSamples`):
    every group's correctness and lengths, all steps pooled; None when a sample has no
    reward or a reward is not 0/1."""
    rewards = trace.samples["reward"]
    if rewards.null_count() or not rewards.is_in([0.0, 1.0]).all():
        return None
    return GroupedSamples(
        correct=[r.astype(bool) for r in trace.flat("reward")],
        lengths=[g.astype(np.float64) for g in trace.flat("length")],
        length_unit=trace.length_unit,
    )


@dataclass(frozen=True)
class GroupsCalibrationConfig:
    """Options of :func:`calibrate_groups`."""

    length_model: str = "lognormal"
    """``lognormal`` (hierarchical fit) or ``empirical`` (observed groups, resampled
    without replacement)."""
    max_response_length: int | None = None
    """Cap (default: the largest cap in the data, else the longest observed length,
    which the simulator then never exceeds)."""
    cost_from: str = "gsm8k"
    """Bundled scenario or calibration file whose cost, engine and prompt length are used
    (prompt length: the data's median when it has one)."""
    name: str = "groups"


def calibrate_groups(trace: GroupedTrace, cfg: GroupsCalibrationConfig) -> dict:
    """Calibration dict (format of :mod:`sim.scenario`) of ``trace``. ``fit`` holds the
    hierarchical fit with standard errors (also in empirical mode, for reference);
    ``pass_rate`` the beta-binomial pass-rate block of
    :func:`calibration.passrate_fit.pass_rate_block` when every sample has a 0/1 reward. Raises ValueError / CalibrationError on a bad
    ``cost_from`` or data the fit cannot use (fewer than 2 groups)."""
    flat = trace.flat("length")
    fit = fit_groups(flat, trace.flat("censored"), trace.group_steps())
    known = trace.known_cap()
    cap = cfg.max_response_length or known or int(trace.samples["length"].max())
    if cfg.length_model == "empirical":
        lengths = {
            "kind": "empirical",
            "values": np.concatenate(flat).astype(int).tolist(),
            "groups": [np.asarray(g).astype(int).tolist() for g in flat],
            "replace": False,
            "max_response_length": cap,
        }
    else:
        m = fit.model(cap)
        lengths = {"kind": "lognormal", **asdict(m)}
    base = load_scenario(cfg.cost_from)
    pt = trace.samples["prompt_tokens"].drop_nulls()
    per_step_b = [len(s) for s in trace.groups("length")]
    sources = [source_entry(p) for p in trace.samples["source"].unique(maintain_order=True)]
    samples = grouped_samples(trace)
    d = calibration_dict(
        name=cfg.name,
        lengths=lengths,
        prompt_tokens=int(pt.median()) if pt.len() else base.prompt_tokens,
        cost=base.cost.to_dict(),
        engine=asdict(base.engine),
        defaults={"prompts": int(np.median(per_step_b))},
        provenance={
            "kind": "grouped per-sample lengths",
            "sources": [
                source_entry(p) for p in trace.samples["source"].unique(maintain_order=True)
            ],
            "length_unit": trace.length_unit,
            "cost_from": str(cfg.cost_from),
            "config": asdict(cfg),
        },
        fit={
            "lengths": fit.to_dict(),
            "steps": len(trace.steps()),
            "group_size": sorted({len(g) for g in flat}),
            "cap_source": "--max-response-length"
            if cfg.max_response_length
            else ("data" if known else "longest observed length (no cap in the data)"),
            "pass_rate": "fitted (block pass_rate)"
            if samples
            else "not fitted: the data have no 0/1 reward for every sample",
        },
    )
    if samples is not None:
        d["pass_rate"] = pass_rate_block(
            samples, {"sources": sources, "command": "rolloutlab calibrate groups"}
        )
    return d
