"""Validate the straggler probability against G on held-out steps of a grouped trace.

Straggler event of a step (SAGC, PAPERS.md §1; :func:`sim.trace.metrics.straggler_ratio`):
``max(L) / median(L) > tau`` over the step's ``B*G`` response lengths.

Measured at group size ``G <= G_logged`` and batch ``B <= B_logged``: each held-out step's
groups are subsampled without replacement (``B`` of its prompts, ``G`` of each group's
samples), ``draws`` times. Groups may differ in size (a prompt sampled in several rounds,
filtered samples, regeneration): ``G_logged`` is the most common size, and at each ``G``
the ``B`` prompts are drawn among the groups holding at least ``G`` samples (``B_logged``:
the fewest such groups at ``G_logged`` over the held-out steps); ``p_straggler_meas`` is the mean of the event over steps and
draws (an unbiased estimate of the step-averaged subsampling expectation, which
:func:`straggler_prob_exact` enumerates on tiny cases), its standard error the spread of
the per-step means over ``sqrt(steps)``; ``ratio_median_meas`` the median ratio.

Measured on another run (``held_out``, :func:`validate_groups`): every step of a second
trace of the same configuration, data the models have not seen at all.

Predicted: the simulator's length model at each held-out step draws ``reps`` steps of
``(B, G_logged)`` lengths; the first ``G`` samples of each group are a draw at ``G``
(common random numbers, :mod:`sim.models.lengths`).

Models in the table (column ``model``): ``hierarchical`` (:func:`calibration.fits.groups_fit.
fit_groups` on the first K steps), ``hierarchical_fitG<g>`` (the same fit on groups
subsampled to ``g``: extrapolation in G), ``tb_stats_icc`` (today's TensorBoard-statistics
path: :func:`calibration.fits.lengths_fit.fit_step`/``fit_run`` on each fit step's pooled mean,
max, min and clip ratio, split by the bundled ICC, :func:`calibration.fits.icc.bundled_icc`),
``no_within`` (the hierarchical fit's total spread, all of it between prompts), and
``empirical`` (whole observed fit-step groups resampled without replacement) and
``empirical_s<W>`` (with ``step_window``: the step-indexed empirical model of
:mod:`sim.models.stepped_lengths`). With ``fit_window`` every model is fitted on the last ``W``
fit steps only (names end in ``_w<W>``); with another within-group law (:mod:`sim.models.within_law`, ``auto`` = least AIC)
the hierarchical models carry the law's name and the normal-law baselines are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import polars as pl
from rolloutlab.calibration.fits.groups_fit import fit_groups, fit_groups_law
from rolloutlab.calibration.fits.icc import bundled_icc
from rolloutlab.calibration.fits.lengths_fit import fit_run, fit_step, split_sigma
from rolloutlab.calibration.fits.transfer import step_stats
from rolloutlab.calibration.readers.grouped import GroupedDataError, GroupedTrace
from rolloutlab.calibration.validation.measure import (
    Measured,
    eligible,
    measure,
    padded,
    step_ratio,
    straggler_prob_exact,
    subsample,
)
from rolloutlab.calibration.validation.transfer import transfer_models
from rolloutlab.sim.models.lengths import EmpiricalLengths, LengthModel, LognormalLengths
from rolloutlab.sim.models.stepped_lengths import SteppedEmpiricalLengths
from scipy import stats

__all__ = [
    "COLUMNS",
    "Measured",
    "ValidationConfig",
    "eligible",
    "fit_data",
    "measure",
    "padded",
    "step_ratio",
    "straggler_prob_exact",
    "subsample",
    "validate_groups",
]

COLUMNS = (
    "G",
    "B",
    "tau",
    "p_straggler_meas",
    "p_straggler_pred",
    "abs_error",
    "ratio_median_meas",
    "ratio_median_pred",
)
"""The issue's columns, first in ``validation_groups.csv``; ``model``, ``fit_G``,
``p_straggler_meas_se``, ``n_steps``, ``ratio_ks`` (two-sample Kolmogorov-Smirnov
distance between the measured and predicted distributions of max/median,
``scipy.stats.ks_2samp``) and ``law`` (the within-group law, :func:`law_name`) follow."""


def predict(model, steps: list[int], B: int, G_max: int, reps: int, seed: int) -> np.ndarray:
    """``(len(steps) * reps, B, G_max)`` lengths drawn from ``model`` at each step (its
    step 0 is the trace's first step: pass ``step - step0``)."""
    rng = np.random.default_rng(seed)
    out = [model.sample(rng, B * reps, G_max, s).reshape(reps, B, G_max) for s in steps]
    return np.concatenate(out)


def tb_stats_model(
    trace: GroupedTrace, fit_steps: int, cap: int, first: int = 0
) -> LognormalLengths:
    """Today's TensorBoard-statistics model: per-step pooled mean/max/min/clip ratio
    (the censored share) fits (:mod:`calibration.fits.lengths_fit`) of steps ``first`` to
    ``fit_steps - 1`` (indices into :meth:`GroupedTrace.steps`), trend lines, spread
    split by the bundled ICC."""
    fits = []
    per_step = zip(
        trace.steps()[first:fit_steps],
        trace.groups("length")[first:fit_steps],
        trace.groups("censored")[first:fit_steps],
        strict=True,
    )
    for s, groups, censored in per_step:
        fits.append(fit_step(step_stats(groups, censored, s, cap)))
    run = fit_run(fits)
    sp, sw = split_sigma(run.sigma0, bundled_icc())
    return LognormalLengths(
        mu=run.mu0,
        sigma_prompt=sp,
        sigma_within=sw,
        max_response_length=cap,
        mu_growth_per_step=run.mu_growth_per_step,
        sigma_growth_per_step=run.sigma_growth_per_step,
    )


def check_taus(taus) -> None:
    """Raises GroupedDataError naming ``--tau`` when a straggler threshold is not > 1."""
    bad = [t for t in taus if not t > 1]
    if bad:
        raise GroupedDataError(f"--tau: expected values > 1, got {bad}")


def check_validation_input(trace: GroupedTrace, fit_steps: int | None, taus) -> int:
    """The logged G (the most common group size, :meth:`GroupedTrace.typical_group_size`;
    groups may differ in size) after the input checks of ``compare groups``. Raises
    GroupedDataError (file, line, field) on no K or a tau <= 1, and (file, field) on one step
    only or K >= steps: those are about the whole data, not one line of it."""
    G = trace.typical_group_size()
    steps = trace.steps()
    first = trace.samples.row(0, named=True)
    where = f"{first['source']}: line {first['line']}"
    if fit_steps is None:
        raise GroupedDataError(f"{where}: --fit-steps: required without a held-out run")
    whole = first["source"]
    if len(steps) < 2:
        raise GroupedDataError(f"{whole}: field 'step': one step only ({steps[0]}); need >= 2")
    if fit_steps >= len(steps):
        raise GroupedDataError(
            f"{whole}: field 'step': --fit-steps {fit_steps} >= the {len(steps)} steps of the data"
        )
    check_taus(taus)
    return G


@dataclass(frozen=True)
class ValidationConfig:
    """Options of :func:`validate_groups`."""

    fit_steps: int | None
    """K: fit on the first K steps (None: all, only with a held-out run)."""
    taus: tuple[float, ...]
    prompts: int | None = None
    """B (default: the smallest logged B of the held-out steps)."""
    fit_G: int | None = None
    """G of the extrapolation fit (default ``G_logged // 2``; 0 = no extrapolation)."""
    draws: int = 200
    reps: int = 300
    cap: int | None = None
    """Response cap (default: the largest cap in the data, else none)."""
    length_model: str = "lognormal"
    """``lognormal`` (hierarchical fit and baselines) or ``empirical``."""
    seed: int = 0
    fit_window: int | None = None
    """Fit on the last ``fit_window`` of the ``fit_steps`` steps only (None: all of them):
    a model of the recent past for a nonstationary run."""
    within_law: str = "normal"
    """Within-group law of the hierarchical fit (:data:`sim.models.within_law.LAWS`, or
    ``auto``: least AIC)."""
    from_step: int = 0
    """With a held-out run: measure only its steps >= ``from_step`` (a late stretch)."""
    transfer: str | None = None
    """``aggregates`` / ``marginal``: only the transferring law of
    :mod:`calibration.validation.transfer` (the other models are not fitted)."""
    target_metrics: str | None = None
    """With ``transfer="aggregates"``: the target's per-step metrics file or folder."""
    step_window: int | None = None
    """Empirical mode: also the step-indexed model ``empirical_s<W>``
    (:class:`sim.models.stepped_lengths.SteppedEmpiricalLengths`), which at step ``t`` draws
    from the ``W`` fit steps around ``t``."""

    def steps_to_fit(self, trace: GroupedTrace) -> int:
        """K, with None read as every step of ``trace``."""
        return len(trace.steps()) if self.fit_steps is None else self.fit_steps

    def model_suffix(self, law: str = "normal") -> str:
        """``""`` with the defaults, else ``_<law>`` (the fitted law, also when chosen by
        ``auto``) and/or ``_w<window>``: the models' names say what was fitted."""
        name = "" if law == "normal" and self.within_law == "normal" else f"_{law}"
        return name + (f"_w{self.fit_window}" if self.fit_window else "")


def fit_data(trace: GroupedTrace, fit_steps: int, window: int | None) -> tuple[list, list, list]:
    """``(lengths, censored, steps)`` of every group of the first ``fit_steps`` steps, or
    of the last ``window`` of them (:meth:`GroupedTrace.flat` order)."""
    flat = trace.flat("length", fit_steps)
    cens = trace.flat("censored", fit_steps)
    at = trace.group_steps(fit_steps)
    if window:
        first = trace.steps()[max(fit_steps - window, 0)]
        keep = [i for i, s in enumerate(at) if s >= first]
        flat, cens, at = [flat[i] for i in keep], [cens[i] for i in keep], [at[i] for i in keep]
    return flat, cens, at


def law_name(fit) -> str:
    """The fitted within-group law of a :class:`calibration.fits.groups_fit.GroupFit`:
    ``normal``, ``gumbel`` or ``t(df=1.23)``."""
    return f"t(df={fit.within_df:.2f})" if fit.within_law == "t" else fit.within_law


def models_for(trace: GroupedTrace, cfg: ValidationConfig, G: int, cap: int) -> dict:
    """``name -> (length model, fit G, the model's step 0, law)`` fitted on the first
    ``cfg.fit_steps`` steps (the last ``cfg.fit_window`` of them when given); the
    hierarchical fit with ``cfg.within_law``. The baselines ``tb_stats_icc`` and
    ``no_within`` (a normal law's split) are left out with another law. ``law``: the
    fitted within-group law (``t(df=..)`` with its degrees of freedom; with ``auto``
    followed by every law's AIC, ``[AIC normal .., gumbel .., t ..]``), or the model's
    kind for the others."""
    fit_steps = cfg.steps_to_fit(trace)
    flat, cens, at = fit_data(trace, fit_steps, cfg.fit_window)
    step0 = min(at)
    out: dict[str, tuple[LengthModel, int, int, str]]
    if cfg.length_model == "empirical":
        sfx = f"_w{cfg.fit_window}" if cfg.fit_window else ""
        full = [i for i, g in enumerate(flat) if len(g) >= G]  # drawn without replacement
        groups = tuple(np.asarray(flat[i], dtype=np.int64) for i in full)
        at = [at[i] for i in full]
        emp = EmpiricalLengths(
            np.concatenate(groups), max_response_length=cap, groups=groups, replace=False
        )
        out = {f"empirical{sfx}": (emp, G, step0, "empirical")}
        if cfg.step_window:
            rel = np.asarray(at, dtype=np.int64) - step0
            stepped = SteppedEmpiricalLengths(groups, rel, cfg.step_window, cap, replace=False)
            out[f"empirical_s{cfg.step_window}{sfx}"] = (stepped, G, step0, "empirical, stepped")
        return out
    hier, aics = fit_groups_law(flat, cens, at, cfg.within_law)
    sfx = cfg.model_suffix(hier.within_law)
    chosen = law_name(hier)
    if len(aics) > 1:
        chosen += " [AIC " + ", ".join(f"{w} {a:.1f}" for w, a in aics.items()) + "]"
    out = {f"hierarchical{sfx}": (hier.model(cap), G, step0, chosen)}
    if hier.within_law == "normal":
        total = float(np.hypot(hier.sigma_prompt, hier.sigma_within))
        steps = trace.steps()
        first = steps.index(step0)
        tb = tb_stats_model(trace, fit_steps, cap, first)
        out[f"tb_stats_icc{sfx}"] = (tb, G, step0, "normal")
        no_within = LognormalLengths(hier.mu0, total, 0.0, cap, hier.mu_growth_per_step)
        out[f"no_within{sfx}"] = (no_within, G, step0, "normal")
    g_fit = G // 2 if cfg.fit_G is None else cfg.fit_G
    if 2 <= g_fit < G:
        rng = np.random.default_rng([cfg.seed, 7])
        pick = [rng.permutation(len(g))[:g_fit] for g in flat]
        sub = fit_groups(
            [g[p] for g, p in zip(flat, pick)],
            [c[p] for c, p in zip(cens, pick)],
            at,
            law=hier.within_law,
        )
        out[f"hierarchical{sfx}_fitG{g_fit}"] = (sub.model(cap), g_fit, step0, law_name(sub))
    return out


UNCAPPED = 2**40
"""Cap of the predicting models when neither the data nor ``--max-response-length`` has one."""


def validate_groups(
    trace: GroupedTrace, cfg: ValidationConfig, held_out: GroupedTrace | None = None
) -> pl.DataFrame:
    """The validation table (module docstring; columns :data:`COLUMNS` then ``model``,
    ``fit_G``, ``p_straggler_meas_se``, ``n_steps``, ``ratio_ks``, ``law``): one row per
    model, tau and G in ``1..G_logged``.

    Without ``held_out`` the models are fitted on the first ``cfg.fit_steps`` steps of
    ``trace`` and measured on its later steps. With ``held_out`` (another run: data the
    models have not seen at all) they are fitted on the first ``cfg.fit_steps`` steps of
    ``trace`` (``None``: all of them) and measured on every step of ``held_out``, each
    predicted at its own step (step ``s`` of the held-out run is the model's step
    ``s - step0``: runs that both start at step 0 line up); G goes up to the held-out
    run's logged group size (:func:`check_held_out`); ``cfg.from_step`` keeps only the held-out steps from it
    on. Raises GroupedDataError on the input errors of
    :func:`check_validation_input` / :func:`check_held_out` or ``--prompts`` above the
    logged B."""
    trace = trace.censored_at(cfg.cap)  # lengths at the stated cap are censored there
    if held_out is None:
        G = check_validation_input(trace, cfg.fit_steps, cfg.taus)
        held = trace.steps()[cfg.fit_steps :]
        mats = [padded(s) for s in trace.groups("length")[cfg.fit_steps :]]
    else:
        G, cfg = check_held_out(trace, held_out, cfg)
        keep = [i for i, s in enumerate(held_out.steps()) if s >= cfg.from_step]
        held = [held_out.steps()[i] for i in keep]
        groups = held_out.groups("length")
        mats = [padded(groups[i]) for i in keep]
    cap = cfg.cap or trace.known_cap() or UNCAPPED
    b_log = logged_batch(held_out or trace, mats, held, G)
    B = cfg.prompts or b_log
    if B > b_log:
        raise GroupedDataError(f"--prompts {B}: above the logged B ({b_log}) of a held-out step")
    meas = {g: measure(mats, B, g, cfg.taus, cfg.draws, cfg.seed) for g in range(1, G + 1)}
    if cfg.transfer:
        target = _target(held_out or trace, held)
        opts = (cfg.transfer, cfg.target_metrics, B, cfg.draws, cfg.seed)
        models = transfer_models(trace, cfg.steps_to_fit(trace), target, cap, G, opts)
    else:
        models = models_for(trace, cfg, G, cap)
    rows = []
    for name, (model, g_fit, step0, law) in models.items():
        draws = predict(model, [s - step0 for s in held], B, G, cfg.reps, cfg.seed + 1)
        for g in range(1, G + 1):
            r = step_ratio(draws[:, :, :g])
            ks = float(stats.ks_2samp(meas[g].ratios, r).statistic)
            for t in cfg.taus:
                p_pred = float((r > t).mean())
                rows.append(
                    {
                        "G": g,
                        "B": B,
                        "tau": float(t),
                        "p_straggler_meas": meas[g].p[t],
                        "p_straggler_pred": p_pred,
                        "abs_error": abs(meas[g].p[t] - p_pred),
                        "ratio_median_meas": meas[g].ratio_median,
                        "ratio_median_pred": float(np.median(r)),
                        "model": name,
                        "fit_G": g_fit,
                        "p_straggler_meas_se": meas[g].p_se[t],
                        "n_steps": len(held),
                        "ratio_ks": ks,
                        "law": law,
                    }
                )
    return pl.DataFrame(rows).sort("model", "tau", "G", maintain_order=True)


def _target(trace: GroupedTrace, steps: list[int]) -> tuple[list[int], list, list]:
    """``(steps, groups, censored)`` of the measured ``steps`` of ``trace``."""
    at = [trace.steps().index(s) for s in steps]
    lengths, cens = trace.groups("length"), trace.groups("censored")
    return steps, [lengths[i] for i in at], [cens[i] for i in at]


def check_held_out(
    trace: GroupedTrace, held_out: GroupedTrace, cfg: ValidationConfig
) -> tuple[int, ValidationConfig]:
    """``(G, cfg)`` for a validation on another run: G the held-out run's logged group
    size with the lognormal models (parametric: they draw groups of any size, so a fit at
    G = 8 predicts G = 16), else the smaller logged group size of the two (the empirical
    model resamples whole fit groups); ``cfg`` with ``fit_steps`` filled in (None: every
    step of ``trace``). Raises
    GroupedDataError (file, line, field) on ``fit_steps`` above
    the steps of ``trace``, no held-out step from ``cfg.from_step`` on, or a tau <= 1."""
    steps = trace.steps()
    fit_steps = cfg.fit_steps or len(steps)
    first = trace.samples.row(0, named=True)
    where = f"{first['source']}: line {first['line']}"
    if fit_steps > len(steps):
        raise GroupedDataError(
            f"{where}: field 'step': --fit-steps {fit_steps} > the {len(steps)} steps of the data"
        )
    if min(fit_steps, len(steps)) < 1:
        raise GroupedDataError(f"{where}: field 'step': no step to fit on")
    check_taus(cfg.taus)
    if not any(s >= cfg.from_step for s in held_out.steps()):
        last = held_out.samples.row(-1, named=True)
        raise GroupedDataError(
            f"{last['source']}: line {last['line']}: field 'step': no step >= --from-step "
            f"{cfg.from_step} (last step {max(held_out.steps())})"
        )
    G = held_out.typical_group_size()
    if cfg.length_model != "lognormal":
        G = min(trace.typical_group_size(), G)
    return G, replace(cfg, fit_steps=fit_steps)


def logged_batch(trace: GroupedTrace, mats: list[np.ndarray], steps: list[int], G: int) -> int:
    """The logged B at group size ``G``: the fewest groups holding ``G`` samples over the
    measured steps (``mats`` of :func:`padded`, one per step of ``steps``). Raises
    GroupedDataError naming the file, line and step of a step with no such group."""
    counts = [eligible(m, G) for m in mats]
    if min(counts) == 0:
        s = steps[counts.index(0)]
        row = trace.samples.filter(pl.col("step") == s).row(0, named=True)
        raise GroupedDataError(
            f"{row['source']}: line {row['line']}: field 'step': step {s} has no group of "
            f"{G} samples (the most common group size); validate on steps with full groups"
        )
    return min(counts)
