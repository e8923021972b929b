"""A per-prompt length history for SAGC: the straggler probability of a step at any G,
read off the lengths the controller has already seen, for the next batch's own prompts.

SAGC's Beta posterior learns ``P(straggler | G)`` from one 0/1 event per step, and only
at the G it runs: the other candidates' posteriors go stale while lengths drift. The
history keeps every recent group's lengths (the last ``steps`` steps: the pool) and each
prompt's latest group (bounded to ``max_prompts`` prompts, least recently seen dropped).
:meth:`LengthHistory.straggler_p` draws ``draws`` steps of the next batch: a prompt seen
before draws its ``G`` lengths from its own latest group, an unseen one from a random
group of the pool, with replacement (a bootstrap: for ``G`` above the group's size it
understates the longest response), and returns the share whose straggler reading
(:func:`sim.trace.metrics.straggler_reading`: step ``max/median > tau`` or the share of
straggling groups above ``level``) fires. SAGC uses it as a prior of weight ``history_n``
pseudo-steps on each Thompson draw (:class:`sim.control.controllers.SAGC`).

Prompt recurrence (dataset epochs) makes it prompt-aware; without recurrence it is the
pool's, a length history of the population.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

import numpy as np


class LengthHistory:
    """Recent groups' lengths (module docstring). ``steps`` >= 1 steps of groups are
    pooled; ``max_prompts`` >= 0 prompts keep their latest group. Raises ValueError on
    a smaller value."""

    def __init__(self, steps: int, max_prompts: int = 1024):
        if steps < 1 or max_prompts < 0:
            raise ValueError(
                f"length history: need steps >= 1 and max_prompts >= 0, got {steps}, {max_prompts}"
            )
        self.steps, self.max_prompts = int(steps), int(max_prompts)
        self.pool: deque[list[np.ndarray]] = deque(maxlen=self.steps)
        self.by_prompt: OrderedDict[int, np.ndarray] = OrderedDict()
        self.last_batch = 0

    def __bool__(self) -> bool:
        return any(self.pool)

    def add(self, lengths: Sequence[Sequence[int]], prompt_ids: Any = None) -> None:
        """Remember one step: ``lengths`` one sequence per prompt (tokens), ``prompt_ids``
        ``(n_prompts,)`` ints in the same order or None. Empty groups are skipped.
        Raises ValueError when ``prompt_ids`` and ``lengths`` differ in length."""
        ids = None if prompt_ids is None else np.asarray(prompt_ids).ravel().tolist()
        if ids is not None and len(ids) != len(lengths):
            raise ValueError(f"length history: {len(ids)} prompt ids for {len(lengths)} groups")
        groups = [np.asarray(g, dtype=np.float64) for g in lengths]
        self.pool.append([g for g in groups if g.size])
        self.last_batch = len(groups)
        for pid, g in zip(ids or [], groups, strict=False):
            if g.size and self.max_prompts:
                self.by_prompt[int(pid)] = g
                self.by_prompt.move_to_end(int(pid))
        while len(self.by_prompt) > self.max_prompts:
            self.by_prompt.popitem(last=False)

    def straggler_p(
        self,
        rng: np.random.Generator,
        G: int,
        tau: float,
        prompt_ids: Any = None,
        reading: str = "step",
        level: float = 0.5,
        draws: int = 64,
    ) -> float:
        """Share of ``draws`` simulated steps of ``G`` lengths per prompt whose straggler
        reading fires (module docstring); the batch is ``prompt_ids`` (or as many unseen
        prompts as the last step had groups). Raises ValueError on an empty history."""
        pool = [g for step in self.pool for g in step]
        if not pool:
            raise ValueError("length history: no lengths seen yet")
        ids = [None] * self.last_batch if prompt_ids is None else np.asarray(prompt_ids).ravel()
        own = [self.by_prompt.get(int(p)) if p is not None else None for p in ids]
        rows = pool + [g for g in own if g is not None]
        width = max(len(g) for g in rows)
        mat = np.zeros((len(rows), width))
        size = np.array([len(g) for g in rows])
        for i, g in enumerate(rows):
            mat[i, : len(g)] = g
        B = len(own)
        src = rng.integers(len(pool), size=(draws, B))  # an unseen prompt: a pool group
        k = len(pool)
        for b, mine in enumerate(own):
            if mine is not None:
                src[:, b] = k
                k += 1
        col = (rng.random((draws, B, G)) * size[src][..., None]).astype(np.int64)
        x = mat[src[..., None], col]  # (draws, B, G)
        if reading == "group":
            share = (x.max(axis=2) / np.median(x, axis=2) > tau).mean(axis=1)
            return float((share > level).mean())
        flat = x.reshape(draws, -1)
        return float((flat.max(axis=1) / np.median(flat, axis=1) > tau).mean())

    def state_dict(self) -> dict[str, Any]:
        """JSON state: the pool (per step, per group, lengths) and the prompts' groups in
        recency order."""
        return {
            "pool": [[g.tolist() for g in step] for step in self.pool],
            "by_prompt": [[pid, g.tolist()] for pid, g in self.by_prompt.items()],
            "last_batch": self.last_batch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.pool = deque(
            ([np.asarray(g, dtype=np.float64) for g in step] for step in state["pool"]),
            maxlen=self.steps,
        )
        self.by_prompt = OrderedDict(
            (int(pid), np.asarray(g, dtype=np.float64)) for pid, g in state["by_prompt"]
        )
        self.last_batch = int(state["last_batch"])
