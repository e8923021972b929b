"""One cell of a cost-model timing grid and what it measured (the records that
:mod:`real.engines.timing_grid` plans, :mod:`real.engines.vllm_grid` measures on a GPU and
:mod:`calibration.fits.vllm_grid` fits :class:`sim.models.cost.LinearCost` to).

A cell runs ``n`` requests together, each with a distinct prompt of ``P`` tokens and
exactly ``L`` generated tokens, so the batch is known at every iteration (the model of
:mod:`calibration.fits.vllm_grid`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GridCell:
    """One cell: ``running_seqs`` requests of ``prompt_tokens`` + ``response_tokens`` tokens."""

    running_seqs: int
    prompt_tokens: int
    response_tokens: int

    @property
    def decode_context_tokens(self) -> float:
        """Mean context (tokens, all sequences) over the decode iterations: ``n (P + L / 2)``."""
        return self.running_seqs * (self.prompt_tokens + self.response_tokens / 2)

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens admitted in the prefill iteration: ``n P``."""
        return self.running_seqs * self.prompt_tokens


@dataclass(frozen=True)
class CellTiming:
    """What one cell measured (seconds)."""

    cell: GridCell
    decode_iter_s: float
    """Median over requests of (last - first token time) / (L - 1)."""
    prefill_s: float
    """First scheduled to last first token: the prefill iteration."""
    call_s: float = 0.0
    """Wall time of the whole ``generate`` call (driver clock)."""
    span_s: float = 0.0
    """Engine time from first arrival to last token (run clock), so ``call_s - span_s`` is overhead."""
