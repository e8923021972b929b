"""A hierarchical lognormal length model whose mean depends on the prompt, fitted to
traced steps.

Model (per prompt ``p`` of a step, sample ``j`` of its group)::

    log L_pj = alpha + beta * log(P_p) + sigma_prompt * z_p + sigma_within * z_pj
    L_pj     = clip(ceil(exp(log L_pj)), 1, max_response_length)

with ``P_p`` the prompt's length in tokens and ``z`` standard normal. It is
:class:`sim.models.lengths.LognormalLengths` with a per-prompt mean: on tasks where the
prompt's size sets the answer's size (the digit-chain task: ``4 n + 3`` tokens for
``n`` digits), knowing the step's prompts (their order and lengths are in the trace)
predicts most of a step's longest rollout. Its draw is therefore
:meth:`PromptLognormalLengths.sample_for_prompts` (the step's prompt lengths in), not the
simulator's :class:`sim.models.lengths.LengthModel` ``sample`` (a prompt count in).

Fit (method of moments on log lengths, one-way random-effects ANOVA): ``(alpha, beta)``
by least squares of the per-group mean log length on ``[1, log P]`` (``beta = 0`` when
every prompt has the same length); ``sigma_within^2`` = pooled within-group variance
(groups with ``G >= 2``); ``sigma_prompt^2 = max(0, var(group-mean residuals) -
sigma_within^2 / G_h)`` with ``G_h`` the harmonic mean group size (the ANOVA estimator,
e.g. Searle, Casella & McCulloch, *Variance Components*, ch. 3).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


def _sample_args(model, prompt_tokens, G: int) -> np.ndarray:
    """``prompt_tokens`` as an array; ValueError naming ``model``'s class on ``G < 1`` or no prompt."""
    P = np.asarray(prompt_tokens)
    if G < 1 or P.size == 0:
        raise ValueError(
            f"{type(model).__name__}.sample_for_prompts: need G >= 1 and prompts, got G={G}, {P.size} prompts"
        )
    return P


@dataclass(frozen=True)
class PromptLognormalLengths:
    """Fitted per-prompt lognormal; see the module docstring for the formula."""

    alpha: float
    """Intercept of mean log length (log tokens)."""
    beta: float
    """Slope of mean log length on log prompt length (0: lengths independent of the prompt)."""
    sigma_prompt: float
    """Spread of a prompt's mean log length around ``alpha + beta log P`` (prompt difficulty)."""
    sigma_within: float
    """Spread of log length within a prompt's group."""
    max_response_length: int
    """Cap in tokens (finish reason ``length`` at the cap)."""

    def __post_init__(self) -> None:
        if self.sigma_prompt < 0 or self.sigma_within < 0 or self.max_response_length < 1:
            raise ValueError(f"PromptLognormalLengths: bad parameters {self}")

    def mean_log(self, prompt_tokens: np.ndarray) -> np.ndarray:
        """``alpha + beta log P`` per prompt, shape of ``prompt_tokens`` (log tokens)."""
        return self.alpha + self.beta * np.log(np.maximum(np.asarray(prompt_tokens, float), 1.0))

    def sample_for_prompts(
        self, rng: np.random.Generator, prompt_tokens: np.ndarray, G: int
    ) -> np.ndarray:
        """``(n_prompts, G)`` int64 lengths in ``[1, max_response_length]`` for these prompts.

        Raises: ValueError on ``G < 1`` or no prompt.
        """
        P = _sample_args(self, prompt_tokens, G)
        z_prompt = rng.standard_normal(P.size)  # (n_prompts,)
        z_within = rng.standard_normal((P.size, G))  # (n_prompts, G)
        log_len = (
            self.mean_log(P)[:, None]
            + self.sigma_prompt * z_prompt[:, None]
            + self.sigma_within * z_within
        )
        return np.clip(np.ceil(np.exp(log_len)), 1, self.max_response_length).astype(np.int64)

    @property
    def icc(self) -> float:
        """Intra-class correlation of log lengths within a group (beyond the prompt-length effect)."""
        total = self.sigma_prompt**2 + self.sigma_within**2
        return self.sigma_prompt**2 / total if total > 0 else 0.0

    def to_dict(self) -> dict:
        """Plain dict of the fields (JSON-serialisable)."""
        return asdict(self)


def fit_prompt_lognormal(
    groups: list[np.ndarray], prompt_tokens: np.ndarray, max_response_length: int
) -> PromptLognormalLengths:
    """Fit :class:`PromptLognormalLengths` to observed groups (module docstring).

    Args:
        groups: one array of response lengths (tokens, >= 1) per prompt group.
        prompt_tokens: ``(n_groups,)`` prompt length of each group (tokens).
        max_response_length: the cap of the run (tokens).
    Raises: ValueError on fewer than 2 groups, a length < 1, or mismatched sizes.
    """
    P = np.asarray(prompt_tokens, float)
    if len(groups) < 2 or len(groups) != P.size:
        raise ValueError(
            f"fit_prompt_lognormal: need >= 2 groups and one prompt length each, "
            f"got {len(groups)} groups and {P.size} prompt lengths"
        )
    logs = [np.log(np.asarray(g, float)) for g in groups]
    if any(g.size == 0 or not np.all(np.isfinite(g)) for g in logs):
        raise ValueError("fit_prompt_lognormal: every group needs lengths >= 1")
    means = np.array([g.mean() for g in logs])  # (n_groups,)
    sizes = np.array([g.size for g in logs])
    logP = np.log(np.maximum(P, 1.0))
    if np.ptp(logP) > 0:
        X = np.column_stack([np.ones_like(logP), logP])  # (n_groups, 2)
        alpha, beta = np.linalg.lstsq(X, means, rcond=None)[0]
    else:
        alpha, beta = float(means.mean()), 0.0
    resid = means - (alpha + beta * logP)
    multi = sizes >= 2
    ss_within = sum(float(((g - g.mean()) ** 2).sum()) for g in logs if g.size >= 2)
    dof = int((sizes[multi] - 1).sum())
    var_within = ss_within / dof if dof > 0 else 0.0
    g_h = len(sizes) / float(np.sum(1.0 / sizes))
    n_coef = 2 if np.ptp(logP) > 0 else 1
    var_means = float((resid**2).sum()) / (len(resid) - n_coef) if len(resid) > n_coef else 0.0
    var_prompt = max(0.0, var_means - var_within / g_h)
    return PromptLognormalLengths(
        float(alpha),
        float(beta),
        float(np.sqrt(var_prompt)),
        float(np.sqrt(var_within)),
        int(max_response_length),
    )


@dataclass(frozen=True)
class PromptEmpiricalLengths:
    """Resamples observed groups, matched on prompt length (an empirical model).

    To draw a prompt's ``G`` lengths: pick uniformly one observed group whose prompt had
    the same length (the nearest observed length when none had), then draw ``G`` lengths
    with replacement from that group. The prompt-length effect, the between-prompt spread
    and the within-group spread are all the observed ones: nothing is assumed about the
    shape of the tail (on the digit-chain task the lognormal's tail is too heavy).
    """

    prompt_tokens: tuple[int, ...]
    """Prompt length (tokens) of each observed group."""
    groups: tuple[tuple[int, ...], ...]
    """Observed response lengths (tokens) of each group."""
    max_response_length: int
    """Cap in tokens."""

    def __post_init__(self) -> None:
        if (
            not self.groups
            or len(self.groups) != len(self.prompt_tokens)
            or any(len(g) == 0 for g in self.groups)
        ):
            raise ValueError(
                "PromptEmpiricalLengths: need >= 1 non-empty group and one prompt length each"
            )

    def sample_for_prompts(
        self, rng: np.random.Generator, prompt_tokens: np.ndarray, G: int
    ) -> np.ndarray:
        """``(n_prompts, G)`` int64 lengths in ``[1, max_response_length]`` for these prompts.

        Raises: ValueError on ``G < 1`` or no prompt.
        """
        P = _sample_args(self, prompt_tokens, G)
        observed = np.asarray(self.prompt_tokens)  # (n_groups,)
        out = np.empty((P.size, G), dtype=np.int64)
        for p, want in enumerate(P):
            gap = np.abs(observed - want)
            pool = np.flatnonzero(gap == gap.min())  # groups of the nearest observed prompt length
            group = np.asarray(self.groups[int(pool[rng.integers(pool.size)])])
            out[p] = group[rng.integers(group.size, size=G)]
        return np.clip(out, 1, self.max_response_length)

    def to_dict(self) -> dict:
        """Summary (JSON-serialisable): group count, prompt lengths seen, cap."""
        return {
            "kind": "empirical-by-prompt-length",
            "groups": len(self.groups),
            "prompt_tokens_seen": sorted(set(int(p) for p in self.prompt_tokens)),
            "max_response_length": self.max_response_length,
        }


def fit_prompt_empirical(
    groups: list[np.ndarray], prompt_tokens: np.ndarray, max_response_length: int
) -> PromptEmpiricalLengths:
    """:class:`PromptEmpiricalLengths` of observed groups (one array of lengths per group,
    ``prompt_tokens`` ``(n_groups,)``). Raises ValueError on no group or mismatched sizes."""
    P = np.asarray(prompt_tokens)
    if len(groups) != P.size:
        raise ValueError(f"fit_prompt_empirical: {len(groups)} groups but {P.size} prompt lengths")
    return PromptEmpiricalLengths(
        tuple(int(p) for p in P),
        tuple(tuple(int(v) for v in g) for g in groups),
        int(max_response_length),
    )
