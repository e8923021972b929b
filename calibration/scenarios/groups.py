"""The calibration file of ``calibrate groups``: lengths fitted on a grouped per-sample
trace (:mod:`calibration.fits.groups_fit`, or the observed groups themselves), cost and engine
of another scenario (a per-sample trace holds no timing), provenance; and the pass-rate
fitter's input from the same reader (:func:`read_pass_rate_samples`, used by
``calibrate pass-rate``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.groups_fit import fit_groups_law
from rolloutlab.calibration.fits.passrate_fit import GroupedSamples, pass_rate_block
from rolloutlab.calibration.readers import grouped_records
from rolloutlab.calibration.readers.grouped import (
    FieldNames,
    GroupedDataError,
    GroupedTrace,
    read_grouped,
)
from rolloutlab.calibration.scenarios.writer import calibration_dict, source_entry
from rolloutlab.calibration.validation.groups import fit_data
from rolloutlab.sim.scenario.scenario import load_scenario


def grouped_samples(trace: GroupedTrace) -> GroupedSamples | None:
    """The pass-rate fitter's input (:class:`calibration.fits.passrate_fit.GroupedSamples`):
    every group's correctness and lengths, all steps pooled; None when a sample has no
    reward or a reward is not 0/1."""
    if reward_problem(trace, "reward") is not None:
        return None
    return GroupedSamples(
        correct=[r.astype(bool) for r in trace.flat("reward")],
        lengths=[g.astype(np.float64) for g in trace.flat("length")],
        length_unit=trace.length_unit,
    )


def reward_problem(trace: GroupedTrace, reward_field: str) -> str | None:
    """One line naming the file, line and ``reward_field`` of the first sample whose
    reward is missing or not 0/1 (a correctness read by :func:`calibration.readers.grouped.
    read_grouped`: booleans are 0/1), or None when every sample has a 0/1 reward."""
    bad = trace.samples.filter(pl.col("reward").is_null() | ~pl.col("reward").is_in([0.0, 1.0]))
    if not bad.height:
        return None
    r = bad.row(0, named=True)
    where = f"{r['source']}: line {r['line']}"
    if r["reward"] is None:
        return f"{where}: no correctness field {reward_field!r}"
    return f"{where}: field {reward_field!r}: correctness {r['reward']:g} is not a boolean or 0/1"


def read_pass_rate_samples(
    path: str | Path,
    score_field: str = "score",
    lengths_field: str | None = None,
    fallback: tuple[str, ...] = ("code",),
) -> GroupedSamples:
    """The pass-rate fitter's input from one grouped per-sample file, read by
    :func:`calibration.readers.grouped.read_grouped` (JSONL/CSV/parquet, one record per prompt or
    per sample): correctness from ``score_field`` (booleans or 0/1), lengths from
    ``lengths_field`` (numbers as given, texts as character counts). ``lengths_field``
    None: the first of ``fallback`` (Qwen2.5-Math's response texts ``code``) present in
    the file, else the common spellings of :data:`calibration.readers.grouped.CANDIDATES`, else
    none: a correctness-only file gives ``lengths`` None (no coupling fit) and
    ``length_unit`` ``"none"``. ``lengths_field`` ``""``: the same lookup (the groups are
    found), but no lengths are returned.

    Raises GroupedDataError (file, line, field) on a missing file, a named field that
    is missing, a correctness that is missing or not 0/1, a correctness list of another
    count than the lengths, or anything :func:`calibration.readers.grouped.read_grouped` refuses."""
    drop = lengths_field == ""
    lengths_field = lengths_field or None
    if lengths_field is None and Path(path).is_file():
        present = grouped_records.columns(Path(path))
        lengths_field = next((f for f in fallback if f in present), None)
    trace = read_grouped(
        [path], FieldNames(lengths=lengths_field, reward=score_field), need_lengths=False
    )
    problem = reward_problem(trace, score_field)
    if problem is not None:
        raise GroupedDataError(problem)
    correct = [r.astype(bool) for r in trace.flat("reward")]
    if drop or trace.samples["length"].null_count():
        return GroupedSamples(correct=correct, lengths=None, length_unit="none")
    samples = grouped_samples(trace)
    assert samples is not None  # every reward is 0/1 (checked above)
    return samples


REFERENCE_FIT_GROUPS = 2000
"""Empirical mode: the reference hierarchical fit (``fit.lengths``) uses every k-th group,
k the smallest that leaves at most this many (204,800 samples of four graph-walk runs
took 3 minutes to fit; 2,000 groups of 16 take seconds)."""


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
    within_law: str = "normal"
    """Within-group law of the hierarchical fit (:data:`sim.models.within_law.LAWS`, or ``auto``:
    least AIC)."""
    fit_window: int | None = None
    """Fit on the last ``fit_window`` steps only (None: all); the model's step 0 is then
    the window's first step, and the empirical mode keeps only the window's groups."""
    step_window: int | None = None
    """Empirical mode: a step-indexed model (:class:`sim.models.stepped_lengths.
    SteppedEmpiricalLengths`) whose step ``t`` draws from the ``step_window`` logged steps
    around ``t`` (None: every group pooled)."""


def calibrate_groups(trace: GroupedTrace, cfg: GroupsCalibrationConfig) -> dict:
    """Calibration dict (format of :mod:`sim.scenario.scenario`) of ``trace``. ``fit`` holds the
    hierarchical fit with standard errors (also in empirical mode, for reference, on at
    most :data:`REFERENCE_FIT_GROUPS` groups: ``fit.lengths_fit_groups`` says which);
    ``pass_rate`` the beta-binomial pass-rate block of
    :func:`calibration.fits.passrate_fit.pass_rate_block` when every sample has a 0/1 reward. Raises ValueError / CalibrationError on a bad
    ``cost_from`` or data the fit cannot use (fewer than 2 groups). Lengths at
    ``cfg.max_response_length`` are censored there (:meth:`GroupedTrace.censored_at`)."""
    trace = trace.censored_at(cfg.max_response_length)
    flat, cens, at = fit_data(trace, len(trace.steps()), cfg.fit_window)
    every = 1
    if cfg.length_model == "empirical":  # the hierarchical fit is for reference only
        every = -(-len(flat) // REFERENCE_FIT_GROUPS)
    fit, aics = fit_groups_law(flat[::every], cens[::every], at[::every], cfg.within_law)
    known = trace.known_cap()
    cap = cfg.max_response_length or known or int(trace.samples["length"].max())
    G_typical = trace.typical_group_size()  # one polars group-by, not one per group
    if cfg.length_model == "empirical":
        # drawn without replacement: a group smaller than the logged G would cap the
        # simulated G at its size, so only groups of the most common size or larger stay
        full = [i for i, g in enumerate(flat) if len(g) >= G_typical]
        groups = [np.asarray(flat[i]).astype(int) for i in full]
        lengths = {
            "kind": "empirical",
            "values": np.concatenate(groups).tolist(),
            "groups": [g.tolist() for g in groups],
            "replace": False,
            "max_response_length": cap,
        }
        if cfg.step_window:
            lengths["group_steps"] = (np.asarray([at[i] for i in full]) - min(at)).tolist()
            lengths["step_window"] = int(cfg.step_window)
    else:
        m = fit.model(cap)
        lengths = {"kind": "lognormal", **asdict(m)}
    base = load_scenario(cfg.cost_from)
    pt = trace.samples["prompt_tokens"].drop_nulls()
    # prompts per step of one run: several runs given together share step numbers
    per_step_b = (
        trace.samples.group_by("source", "step")
        .agg(pl.col("prompt").n_unique())["prompt"]
        .to_list()
    )
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
            "fit_steps": [int(min(at)), int(max(at))] if cfg.fit_window else "all",
            "aic_by_law": aics,
            "group_size": sorted({len(g) for g in flat}),
            "empirical_groups_left_out": (
                sum(len(g) < G_typical for g in flat) if cfg.length_model == "empirical" else 0
            ),
            "lengths_fit_groups": f"1 in {every} ({len(flat[::every])} of {len(flat)})"
            if every > 1
            else "all",
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


def merge_existing(d: dict, existing: dict, cost_kept: bool) -> tuple[dict, list[str], list[str]]:
    """``(merged, kept, replaced)``: the new calibration ``d`` written over the existing
    calibration ``existing`` as ``calibrate learning`` does (everything the new fit does
    not produce stays): every block of ``existing`` that ``d`` lacks (``learning``,
    ``multi_turn`` ...), the ``defaults`` keys ``d`` does not set (``target_reward``,
    ``lr`` ...); ``d``'s own blocks win (a ``pass_rate`` the data fit is ``replaced``).
    ``cost_kept``: ``d``'s cost and engine were taken from ``existing`` (its
    ``--cost-from``), listed as kept. ``provenance.merged_into`` records both lists."""
    out = dict(d)
    kept = ["cost", "engine"] if cost_kept else []
    for key, value in existing.items():
        if key not in d and key not in ("fit", "provenance"):
            out[key] = value
            kept.append(key)
    old_defaults = existing.get("defaults") or {}
    if set(old_defaults) - set(d.get("defaults") or {}):
        out["defaults"] = {**old_defaults, **(d.get("defaults") or {})}
        kept.append("defaults")
    replaced = [k for k in ("pass_rate", "learning") if k in d and k in existing]
    out["provenance"] = {**d["provenance"], "merged_into": {"kept": kept, "replaced": replaced}}
    return out, kept, replaced
