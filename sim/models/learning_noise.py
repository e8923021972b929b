"""Gradient-noise term of the learning law (docs/learning.md §2, "Progress with noise").

A step's drive along the logit shift, at infinite batch, is the mean-field law's
``mu = kappa (lr / lr_ref) (1 / B) sum_i g_i f_i`` (:mod:`sim.models.learning`). A real
update estimates the gradient from ``n`` informative samples (responses of groups whose
rewards differ; a homogeneous group has zero advantage and adds nothing), so

    D = mu X / (1 + b_noise / n),     X ~ Gamma(shape n / b_noise, scale b_noise / n)
    E[X] = 1, sd X = sqrt(b_noise / n),  E[D] = mu / (1 + b_noise / n),  D = 0 when n = 0

- ``1 / (1 + b_noise / n)``: the critical-batch structure of McCandlish et al. 2018 ("An
  Empirical Model of Large-Batch Training", docs/PAPERS.md §3): a step of batch ``B``
  gains ``dL_max / (1 + B_noise / B)``, so the steps to a target are
  ``S = S_min (1 + B_noise / B)``. ``b_noise`` is B_noise counted in informative samples.
- ``X``: the same noise scale read as the ratio of the per-sample gradient variance along
  the signal to the squared signal (their "simple" noise scale, restricted to the one
  direction this model has): a mean of ``n`` samples has relative sd
  ``sqrt(b_noise / n)`` (**modelling choice**: one constant for both terms). Gamma, not
  normal (**modelling choice**): a step never moves backwards, so the saturating shift
  (whose backward steps grow exponentially) stays finite; its mean and sd are the normal's.
- ``b_noise = 0`` or ``n -> inf`` gives ``D = mu``: the mean-field law exactly.
- ``n`` counts *effective* samples: the G responses of one prompt are not independent
  draws of the population gradient (they share the prompt), so a group of G counts
  ``G / (1 + (G - 1) rho)`` (Kish's design effect of cluster sampling, Kish 1965 "Survey
  Sampling" §5.4; docs/PAPERS.md §3), ``rho`` in [0, 1] the intra-prompt correlation of
  the per-sample gradient along the shift. ``rho = 0`` counts every response (the law
  before this term), ``rho = 1`` counts prompts. With rho > 0, at equal rollouts B G more
  prompts beat bigger groups, as the real runs of docs/learning.md §5 do.

``g_i``: the group's signal along the shift. With Bernoulli rewards the score of a response
along theta is ``r - p``; the GRPO advantage ``A_j = r_j - rbar`` (Dr. GRPO, no std) gives
``(1/G) sum_j A_j (r_j - p) = s_i`` (the population variance), and the group-std
normalised advantage ``(r_j - rbar) / sigma_i`` (GRPO, DeepSeekMath §4.1.2) gives
``s_i / sigma_i = sqrt(s_i)``.
"""

from __future__ import annotations

import numpy as np
from scipy import special

ADVANTAGES = ("mean", "std")
"""Advantage forms: ``mean`` = ``r - rbar`` (signal ``s_i``, the law before the noise
term), ``std`` = ``(r - rbar) / sigma`` (signal ``sqrt(s_i)``)."""


def step_signal(var, advantage: str = "mean") -> np.ndarray:
    """Per-group signal (n,) along the shift from the groups' reward variances ``var``
    (n,) >= 0 (population, :func:`sim.models.learning.group_signal`): ``var`` for
    ``advantage="mean"``, ``sqrt(var)`` for ``"std"``. Raises ValueError on another form."""
    if advantage not in ADVANTAGES:
        raise ValueError(f"advantage: expected one of {ADVANTAGES}, got {advantage!r}")
    v = np.asarray(var, float)
    return v if advantage == "mean" else np.sqrt(v)


def design_effect(G, rho: float) -> np.ndarray:
    """Kish's design effect ``1 + (G - 1) rho`` of a group of ``G`` >= 1 responses (any
    shape) whose gradients correlate ``rho`` in [0, 1] (module docstring): the group counts
    as ``G / design_effect`` independent samples. Raises ValueError on rho outside [0, 1]."""
    if not 0 <= rho <= 1:
        raise ValueError(f"rho: expected in [0, 1], got {rho}")
    return 1 + (np.asarray(G, float) - 1) * rho


def effective_samples(groups, G, rho: float = 0.0) -> np.ndarray:
    """Effective samples of ``groups`` informative groups of ``G`` responses each (any
    shapes; broadcast): ``groups G / (1 + (G - 1) rho)`` (module docstring). ``rho = 0``
    is the responses' count. Raises ValueError as :func:`design_effect`."""
    G = np.asarray(G, float)
    return np.asarray(groups, float) * G / design_effect(G, rho)


def informative_samples(var, samples, rho: float = 0.0) -> float:
    """Effective samples in the informative groups: ``sum_i samples_i / (1 + (samples_i -
    1) rho) [var_i > 0]`` (samples, e.g. G_i; ``var`` and ``samples`` (n,); rho = 0: the
    responses in them). Raises ValueError on mismatched shapes or rho outside [0, 1]."""
    v, s = np.asarray(var, float), np.asarray(samples, float)
    if v.shape != s.shape:
        raise ValueError(f"samples: expected shape {v.shape}, got {s.shape}")
    return float(effective_samples(1.0, s[v > 0], rho).sum())


def efficiency(n, b_noise: float) -> np.ndarray:
    """Expected share of the infinite-batch drive, ``1 / (1 + b_noise / n)`` (0 at n = 0;
    1 for b_noise = 0 and n > 0). ``n`` informative samples (any shape), b_noise >= 0
    (samples). Raises ValueError on negative values."""
    n = np.asarray(n, float)
    if b_noise < 0 or np.any(n < 0):
        raise ValueError(f"efficiency: expected n >= 0 and b_noise >= 0, got {b_noise}")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, n / (n + b_noise), 0.0)


def noisy_drive(mu, n, b_noise: float, x):
    """The step's drive ``mu x / (1 + b_noise / n)`` (module docstring; 0 where n = 0).
    ``mu`` (logit units), ``n`` (samples), ``x`` draws of :func:`noise_multiplier` (1 = the
    expectation); broadcasts. Raises ValueError as :func:`efficiency`."""
    return np.asarray(mu, float) * np.asarray(x, float) * efficiency(n, b_noise)


def noise_multiplier(rng: np.random.Generator, n, b_noise: float) -> np.ndarray:
    """Draws (shape of ``n``) of ``X ~ Gamma(n / b_noise, b_noise / n)``: mean 1, sd
    ``sqrt(b_noise / n)``; 1 where ``n = 0`` or ``b_noise = 0``."""
    n = np.asarray(n, float)
    live = (n > 0) & (b_noise > 0)
    shape = np.where(live, n / max(b_noise, 1e-300), 1.0)
    return np.where(live, rng.gamma(shape, 1 / shape), 1.0)


def expected_group_signal(p, G: int, advantage: str = "mean") -> np.ndarray:
    """E[signal] of one group of G Bernoulli(p) rewards, exact over k ~ Binomial(G, p):
    ``E[s] = p (1 - p) (1 - 1/G)`` for ``mean``, ``E[sqrt(s)]``, ``s = k/G (1 - k/G)``,
    for ``std``. ``p`` any shape in [0, 1], G >= 1."""
    p = np.asarray(p, float)
    if advantage == "mean":
        return p * (1 - p) * (1 - 1 / G)
    k = np.arange(G + 1)
    s = step_signal((k / G) * (1 - k / G), advantage)  # (G + 1,)
    pmf = special.comb(G, k) * p[..., None] ** k * (1 - p[..., None]) ** (G - k)
    return pmf @ s


def informative_share(p, G: int) -> np.ndarray:
    """P(a group of G Bernoulli(p) rewards is not homogeneous) = ``1 - p^G - (1 - p)^G``."""
    p = np.asarray(p, float)
    return 1 - p**G - (1 - p) ** G
