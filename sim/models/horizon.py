"""The collapse-horizon law: time to collapse as a function of staleness S and learning
rate eta, fitted to censored runs, with bootstrap intervals over seeds.

Source: PAPERS.md §2 (Song et al., 2026). A run is stable only under two constraints: a
per-step one, ``S eta <~ C_safe`` (the stale-rollout bias ``O(S eta)`` must stay below a
batch-level radius), and a cumulative one over its horizon, ``T eta <~ R_crit`` (drift
``~ t eta`` reaches the critical radius; equivalently ``M_collapse S eta ~ const``).
The law writes the two failure modes as competing hazards (rates per learner step) whose
sum sets the median collapse step::

    rate_horizon = g eta^a / R                     # t = R / eta^a: §2's horizon law (a = 1)
    rate_stale   = ((S-1)^c eta / C)^k / S         # >= 1 / S once (S-1)^c eta >= C:
                                                   # collapse within the first sync cycle
    t_med(S, eta) = t_0 + 1 / (rate_horizon + rate_stale)

``g`` is 1 at ``S = 1`` and the *stale drift multiplier* ``D`` at ``S >= 2`` (1 unless
fitted: :func:`fit_horizon_groups` with ``drift=True`` fits one ``D`` per mechanism, so a
clip / IS setting can speed or slow the cumulative drift of stale runs; §2 has ``D = 1``,
the horizon ``t eta = R`` whatever S — a **modelling choice** of the mechanism
covariate). ``t_0`` is the earliest step a collapse can be seen at: 1, and 2 for ``S >= 2``
(in the sync-interval mode step 1 trains on fresh rollouts; the first stale update is step
2) — a **modelling choice** — and no earlier than the detector's KL patience ``floor`` (an
excursion must last that many steps; :attr:`HorizonLaw.floor`, from the grid's config). So
``S eta << C`` gives the horizon limit ``t = R / eta^a`` (``t eta = R``, independent of
S, ``M S eta = R``), and ``(S-1)^c eta >> C`` the stale limit ``t <= S``. ``S`` is
``max(S, 1)``; ``S - 1`` is the lag of a cycle's oldest rollout (versions), so the synchronous ``S = 1`` has no
stale mode (**modelling choice**: §2's ``S eta`` bound counts the update span, ``S``; the
two agree up to the span/lag offset, and ``c = 1`` is §2's). The exponents ``a`` (eta) and
``c`` (S in the per-step constraint) are fitted and compared with §2's ``a = c = 1``; ``k``
(the sharpness of the per-step constraint) is a **modelling choice** fitted in ``[1, 8]``.

Observation model (**modelling choice**): ``log t_collapse ~ Normal(log t_med, sigma^2)``
(a log-normal accelerated-failure-time model); a run that did not collapse within its
``T`` steps is right-censored at ``T``: its likelihood is ``P(t > T) = sf((log T - log
t_med) / sigma)`` (survival likelihood, not dropped). Maximum likelihood with
:func:`scipy.optimize.minimize`. Intervals: stratified bootstrap over seeds (each
``(S, eta)`` cell's runs resampled with replacement, refit), percentiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, special, stats

PAPER = {"a": 1.0, "c": 1.0}
"""§2's exponents: horizon ``t ∝ 1/eta``; per-step constraint on ``S eta`` (``eta_max ∝ 1/S``)."""
NAMES = ("log_R", "a", "log_C", "c", "k", "log_sigma")
K_RANGE = (1.0, 8.0)


class HorizonInputError(ValueError):
    """Runs a horizon law cannot be fitted to; the message names the problem."""


@dataclass(frozen=True)
class HorizonLaw:
    """Fitted constants of the law (module docstring)."""

    R: float
    """Horizon constant: ``t eta^a`` of horizon collapses (learner steps x lr^a)."""
    a: float
    """Exponent of eta in the horizon limit (§2: 1)."""
    C: float
    """Per-step constant: the stale mode takes over where ``(S - 1)^c eta ~ C``."""
    c: float
    """Exponent of S in the per-step constraint (§2: 1)."""
    k: float
    """Sharpness of the per-step constraint (in ``[1, 8]``)."""
    sigma: float
    """Seed scatter of ``log t_collapse`` (natural log)."""
    drift: float = 1.0
    """Stale drift multiplier ``D``: the horizon rate at ``S >= 2`` is ``D eta^a / R``
    (1: §2's S-independent horizon)."""
    floor: float = 1.0
    """Earliest step the collapse detector can report, a property of the measurement, not
    fitted: its KL patience (an excursion must last that many steps). ``t_0`` is
    ``max(1 or 2, floor)``."""

    def median(self, S, eta) -> np.ndarray:
        """Median collapse step ``t_med`` (learner steps, float) at arrays ``S``, ``eta``
        (broadcast; S < 1 counts as 1)."""
        S = np.maximum(np.asarray(S, float), 1.0)
        eta = np.asarray(eta, float)
        with np.errstate(over="ignore", divide="ignore"):
            g = np.where(S >= 2, self.drift, 1.0)
            rate = g * eta**self.a / self.R + ((S - 1) ** self.c * eta / self.C) ** self.k / S
        return np.maximum(np.where(S >= 2, 2.0, 1.0), self.floor) + 1.0 / rate

    def p_collapse(self, S, eta, T) -> np.ndarray:
        """``P(t_collapse <= T)`` under the log-normal scatter."""
        z = (np.log(np.asarray(T, float)) - np.log(self.median(S, eta))) / self.sigma
        return stats.norm.cdf(z)

    def eta_max(self, S, T, p: float = 0.5) -> np.ndarray:
        """Largest eta with ``P(collapse within T) <= p`` (bisection in log eta)."""
        S = np.atleast_1d(np.asarray(S, float))
        lo, hi = np.full(S.shape, np.log(1e-9)), np.full(S.shape, np.log(10.0))
        for _ in range(60):
            mid = (lo + hi) / 2
            bad = self.p_collapse(S, np.exp(mid), T) > p
            hi, lo = np.where(bad, mid, hi), np.where(bad, lo, mid)
        return np.exp(lo)


@dataclass(frozen=True)
class TwoPartLaw:
    """Whether and when apart (**modelling choice**, a cure-type split of the two
    questions; Farewell 1982): ``occurrence``, the censored law fitted to every run, gives
    ``P(t_collapse <= T)``; ``step``, the same form fitted to the collapsed runs alone,
    gives the median collapse step of a run that collapses. A run that survives its T
    steps is then "not collapsing" for the step, not "collapsing late". Any other
    attribute (``a``, ``c``, ``R``, ...) is the step law's."""

    occurrence: HorizonLaw
    step: HorizonLaw

    def median(self, S, eta) -> np.ndarray:
        """The step law's median collapse step (:meth:`HorizonLaw.median`)."""
        return self.step.median(S, eta)

    def p_collapse(self, S, eta, T) -> np.ndarray:
        """The occurrence law's ``P(t_collapse <= T)`` (:meth:`HorizonLaw.p_collapse`)."""
        return self.occurrence.p_collapse(S, eta, T)

    def __getattr__(self, name: str) -> float:
        if name in ("occurrence", "step") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.step, name)


def _unpack(x: np.ndarray, floor: float = 1.0) -> HorizonLaw:
    """Law from ``x``: the 6 entries of :data:`NAMES`, then optionally ``log D``."""
    lo, hi = K_RANGE
    k = lo + (hi - lo) * special.expit(x[4])
    with np.errstate(over="ignore"):
        return HorizonLaw(
            float(np.exp(x[0])),
            float(x[1]),
            float(np.exp(x[2])),
            float(x[3]),
            float(k),
            float(np.exp(x[5])),
            float(np.exp(x[6])) if len(x) > 6 else 1.0,
            float(floor),
        )


def neg_log_likelihood(law: HorizonLaw, S, eta, t, T) -> float:
    """Censored log-normal negative log-likelihood of runs (module docstring).

    Arrays ``(n,)``: ``t`` the collapse step (NaN: did not collapse within ``T``).
    """
    mu = np.log(law.median(S, eta))
    event = np.isfinite(t)
    z_event = (np.log(np.where(event, t, 1.0)) - mu) / law.sigma
    z_cens = (np.log(T) - mu) / law.sigma
    ll = np.where(
        event,
        -0.5 * z_event**2 - np.log(law.sigma) - 0.5 * np.log(2 * np.pi),
        special.log_ndtr(-z_cens),  # log P(t > T)
    )
    return float(-ll.sum())


def _start(S, eta, t) -> np.ndarray:
    ev = np.isfinite(t)
    r = np.median(t[ev] * eta[ev]) if ev.any() else 10.0 * np.max(eta) * 100
    c = np.max(S * eta) * 2
    return np.array([np.log(r), 1.0, np.log(c), 1.0, 0.0, np.log(0.7)])


def _group_x(x: np.ndarray, j: int, n_groups: int = 1) -> np.ndarray:
    """Group ``j``'s law parameters: the 6 shared ones with ``log C`` shifted by its offset
    (``x[5 + j]``, ``j > 0``), and its ``log D`` (``x[4 + n_groups + j]``) when ``x`` has
    one per group (the drift law)."""
    xj = np.array(x[:6], float)
    if j > 0:
        xj[2] += x[5 + j]
    d = 5 + n_groups + j
    return np.append(xj, x[d]) if len(x) > d else xj


def _fit_once(
    S,
    eta,
    t,
    T,
    group,
    x0: np.ndarray,
    restarts: bool = True,
    c_fixed: float | None = None,
    floor: float = 1.0,
) -> np.ndarray:
    n_groups = int(group.max()) + 1
    members = [group == j for j in range(n_groups)]

    def f(x):
        if c_fixed is not None:
            x = np.concatenate([x[:3], [c_fixed], x[4:]])
        if not (0.2 < x[1] < 3 and -1 < x[3] < 4 and -5 < x[5] < 3):
            return 1e12
        if np.any(np.abs(x[5 + n_groups :]) > 5):  # log D: a factor e^5 either way at most
            return 1e12
        return sum(
            neg_log_likelihood(_unpack(_group_x(x, j, n_groups), floor), S[m], eta[m], t[m], T[m])
            for j, m in enumerate(members)
            if m.any()
        )

    shift = np.zeros_like(x0)
    shift[2] = 1.0
    opts = {"maxiter": 3000 * len(x0) // 6, "xatol": 1e-4, "fatol": 1e-6}
    results = []
    for start in (x0, x0 + shift, x0 - shift) if restarts else (x0,):
        res = optimize.minimize(f, start, method="Nelder-Mead", options=opts)
        for _ in range(4):  # why: Nelder-Mead's simplex collapses on this law's ridges
            again = optimize.minimize(f, res.x, method="Nelder-Mead", options=opts)
            done = res.fun - again.fun < 1e-3
            res = again if again.fun < res.fun else res
            if done:
                break
        results.append(res)
    x = np.asarray(min(results, key=lambda r: r.fun).x)
    if c_fixed is not None:
        x[3] = c_fixed
    return x


def check_runs(S, eta, t, T) -> tuple[np.ndarray, ...]:
    """Validated float arrays ``(S, eta, t, T)``.

    Raises :class:`HorizonInputError` when lengths differ, an eta is not finite and > 0,
    a collapse step is outside ``[1, T]``, the runs mix step counts ``T``, the grid has a
    single S or a single eta (a law of two variables needs two of each), or no run collapsed.
    """
    S, eta, t, T = (np.asarray(v, float).ravel() for v in (S, eta, t, T))
    if not (len(S) == len(eta) == len(t) == len(T)) or len(S) == 0:
        raise HorizonInputError("runs: S, lr, t_collapse and T must be non-empty and equally long")
    if not np.all(np.isfinite(eta) & (eta > 0)) or not np.all(np.isfinite(S) & (S >= 0)):
        raise HorizonInputError("runs: every lr must be finite and > 0 and every S >= 0")
    if len(np.unique(T)) > 1:
        raise HorizonInputError(
            f"runs of different step counts mixed (T = {sorted(set(T.tolist()))}); "
            "fit one T at a time"
        )
    for name, v in (("S", np.maximum(S, 1)), ("lr", eta)):
        if len(np.unique(v)) < 2:
            raise HorizonInputError(
                f"the grid has a single {name} ({v[0]:g}); a horizon law needs two or more"
            )
    ev = np.isfinite(t)
    if not ev.any():
        raise HorizonInputError("no run collapsed: nothing to fit a collapse horizon to")
    if np.any((t[ev] < 1) | (t[ev] > T[ev])):
        raise HorizonInputError("runs: a t_collapse is outside [1, T]")
    return S, eta, t, T


@dataclass(frozen=True)
class HorizonFit:
    """A fitted law with its bootstrap replicates."""

    law: HorizonLaw | TwoPartLaw
    boot: tuple[HorizonLaw | TwoPartLaw, ...]
    """Refits on bootstrap resamples (may be empty)."""
    n_runs: int
    n_collapsed: int
    c_fixed: bool = False
    """True when the runs had a single stale S (``S >= 2``): ``c`` held at §2's 1."""

    def interval(self, name: str, q=(0.16, 0.84)) -> tuple[float, float]:
        """Bootstrap percentile interval of a constant (NaN, NaN without replicates)."""
        v = np.array([getattr(b, name) for b in self.boot])
        return (float("nan"),) * 2 if not len(v) else tuple(np.quantile(v, q).tolist())

    def predict(self, S, eta, q=(0.16, 0.84)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(median, lo, hi)`` collapse step at ``S``, ``eta``: the fit's median and the
        bootstrap percentile interval of the median (``lo = hi = median`` without replicates)."""
        med = self.law.median(S, eta)
        if not self.boot:
            return med, med, med
        reps = np.array([b.median(S, eta) for b in self.boot])
        return med, np.quantile(reps, q[0], axis=0), np.quantile(reps, q[1], axis=0)


def fit_horizon(
    S, eta, t, T, n_boot: int = 200, rng_seed: int = 0, floor: float = 1.0
) -> HorizonFit:
    """Fit :class:`HorizonLaw` to runs (arrays ``(n,)``: ``S``, ``eta`` = lr, ``t`` the
    1-based collapse step or NaN if the run did not collapse within its ``T`` steps).

    The bootstrap (``n_boot`` refits, seeded by ``rng_seed``) resamples each ``(S, eta)``
    cell's runs, i.e. its seeds. With one stale S value (``S >= 2``) the exponent ``c``
    is not identified and is held at §2's 1 (``HorizonFit.c_fixed``). Raises
    :class:`HorizonInputError` (:func:`check_runs`). ``floor``: :attr:`HorizonLaw.floor`
    (the detector's KL patience; 1: none).
    """
    zeros = np.zeros(len(np.ravel(S)), int)
    return fit_horizon_groups(S, eta, t, T, zeros, n_boot, rng_seed, floor=floor)[0]


def fit_horizon_groups(
    S,
    eta,
    t,
    T,
    group,
    n_boot: int = 200,
    rng_seed: int = 0,
    drift: bool = False,
    floor: float = 1.0,
    shared_lr: bool = False,
) -> list[HorizonFit]:
    """One law per group (``group``: ints ``0..g-1`` per run, e.g. the loss mechanism)
    sharing ``R, a, c, k, sigma`` and with its own per-step constant ``C``: the mechanism
    as a covariate of the stale mode only (**modelling choice**: at ``S = 1`` with one
    minibatch per step every clip / IS setting takes the same step, so the horizon mode
    cannot differ). ``drift``: each group also gets its own stale drift multiplier ``D``
    (:attr:`HorizonLaw.drift`, the horizon rate at ``S >= 2``; ``g`` more parameters), so a
    mechanism can move the horizon of stale runs too. Returns the groups' fits in group
    order; otherwise as :func:`fit_horizon`. Raises :class:`HorizonInputError`
    (:func:`check_runs`, per group).``shared_lr``: a group may hold a single lr (the runs together still
    need two): its ``C`` is fitted against the exponents the groups share, e.g. the
    collapsed runs of a mechanism that collapsed at one lr only."""
    S, eta, t, T = check_runs(S, eta, t, T)
    group = np.asarray(group, int).ravel()
    n_groups = int(group.max()) + 1
    for j in range(n_groups):
        m = group == j
        if not shared_lr:
            check_runs(S[m], eta[m], t[m], T[m])
        elif not np.isfinite(t[m]).any():
            raise HorizonInputError(f"group {j}: no run collapsed; nothing to fit its C to")
    S1 = np.maximum(S, 1.0)
    # with a single stale S (S - 1 > 0) only (S-1)^c / C is identified: c is held at §2's
    c_fixed = PAPER["c"] if len(np.unique(S1[S1 >= 2])) < 2 else None
    x0 = np.concatenate([_start(S1, eta, t), np.zeros(n_groups - 1)])
    x = _fit_once(S1, eta, t, T, group, x0, c_fixed=c_fixed, floor=floor)
    if drift:  # why: started at the D = 1 optimum, the nested law's likelihood is never worse
        x0 = np.append(x, np.zeros(n_groups))
        x = _fit_once(S1, eta, t, T, group, x0, c_fixed=c_fixed, floor=floor)
    rng = np.random.default_rng(rng_seed)
    cells: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(group.tolist(), S1.tolist(), eta.tolist())):
        cells.setdefault(key, []).append(i)
    members = [np.array(v) for v in cells.values()]
    boot: list[list[HorizonLaw]] = [[] for _ in range(n_groups)]
    for _ in range(n_boot):
        idx = np.concatenate([rng.choice(g, len(g)) for g in members])
        if not all(np.isfinite(t[idx][group[idx] == j]).any() for j in range(n_groups)):
            continue
        xb = _fit_once(S1[idx], eta[idx], t[idx], T[idx], group[idx], x, False, c_fixed, floor)
        for j in range(n_groups):
            boot[j].append(_unpack(_group_x(xb, j, n_groups), floor))
    return [
        HorizonFit(
            _unpack(_group_x(x, j, n_groups), floor),
            tuple(boot[j]),
            int((group == j).sum()),
            int(np.isfinite(t[group == j]).sum()),
            c_fixed is not None,
        )
        for j in range(n_groups)
    ]


def fit_to_dict(fit: HorizonFit) -> dict:
    """JSON-ready ``{"law": {...}, "boot": [{...}, ...], "n_runs", "n_collapsed"}``."""
    return {
        "law": dict(zip(LAW_FIELDS, (getattr(fit.law, f) for f in LAW_FIELDS))),
        "boot": [dict(zip(LAW_FIELDS, (getattr(b, f) for f in LAW_FIELDS))) for b in fit.boot],
        "n_runs": fit.n_runs,
        "n_collapsed": fit.n_collapsed,
        "c_fixed": fit.c_fixed,
    }


def fit_from_dict(d: dict) -> HorizonFit:
    """Inverse of :func:`fit_to_dict`. Raises :class:`HorizonInputError` on a missing or
    non-numeric field."""
    try:
        return HorizonFit(
            _law_from(d["law"]),
            tuple(_law_from(b) for b in d.get("boot", [])),
            int(d.get("n_runs", 0)),
            int(d.get("n_collapsed", 0)),
            bool(d.get("c_fixed", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise HorizonInputError(f"not a horizon law ({type(exc).__name__}: {exc})") from None


def _law_from(d: dict) -> HorizonLaw:
    """A law from its fields (``drift``, ``floor`` 1 when absent: laws written before)."""
    return HorizonLaw(
        **{f: float(d[f] if f in d or f not in OPTIONAL else 1.0) for f in LAW_FIELDS}
    )


LAW_FIELDS = ("R", "a", "C", "c", "k", "sigma", "drift", "floor")
OPTIONAL = ("drift", "floor")
