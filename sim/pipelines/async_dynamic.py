"""Dynamic sampling in the asynchronous pipelines: admission and batch sizing by the
groups still expected to be trained, and the per-step round accounting.

:mod:`sim.pipelines.async_pipeline` admits prompt batch ``j`` while ``j - v_gen <= lead``: one
batch per learner step. With dynamic sampling a step may need several batches, so the
rule is stated in groups instead: a new generation batch is admitted while

    live < B (v_gen + lead + 1)

``live`` = groups dispatched minus those filtered (homogeneous), dropped (stale) or
written off by an aborted step: the groups trained or still expected to be. Without any
filtered or dropped group this is the batch rule again. The batch size is
``ceil(F B)`` (``refill="batch"``, or when a whole step is missing) or only the missing
``B (v_gen + lead + 1) - live`` prompts (``refill="missing"``).

The learner takes ready groups in completion order: stale ones are dropped as without dynamic sampling,
homogeneous ones filtered, informative ones kept until B. A *round* of step ``t`` is a
generation batch it examined a (not stale) group of. With ``max_gen_batches = k > 0`` the step
aborts (trains on what it kept) once its k batches are fully examined with fewer than B
kept; ready groups of other batches are set aside meanwhile and left, in their order,
for the next step. The missing groups are then written off from ``live`` so that the
next step's admission starts from a full deficit. (docs/dynamic_sampling.md)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rolloutlab.sim.pipelines.dynamic_sampling import DynamicSampling

MAX_FILTERED_PER_STEP = 10**6
"""Groups one step may filter with ``max_gen_batches = 0`` before the run is declared
hopeless (every pass rate 0 or 1, or G = 1: no group can ever be informative)."""


@dataclass
class AsyncRounds:
    """Dynamic-sampling state of one asynchronous run (module docstring)."""

    ds: DynamicSampling
    B: int
    lead: int
    live: int = 0
    sizes: dict[int, int] = field(default_factory=dict)
    """Groups of each dispatched batch."""
    examined: dict[int, int] = field(default_factory=dict)
    """Groups of each batch the learner has taken out of the ready queue."""
    seen: list[int] = field(default_factory=list)
    """Batches the current step examined a group of, in order."""
    filtered: int = 0
    """Groups the current step filtered."""

    def deficit(self, v_gen: int) -> int:
        """Groups still to dispatch for the steps the generators may run ahead to."""
        return self.B * (v_gen + self.lead + 1) - self.live

    def admissible(self, v_gen: int) -> bool:
        """A new batch may be dispatched."""
        return self.deficit(v_gen) > 0

    def batch_size(self, v_gen: int) -> int:
        """Prompts of the next batch (``refill`` rule of the module docstring)."""
        full = math.ceil(self.ds.gen_batch_factor * self.B - 1e-9)
        d = self.deficit(v_gen)
        return full if self.ds.refill == "batch" or d >= self.B else d

    def dispatched(self, j: int, n: int) -> None:
        """Batch ``j`` of ``n`` groups was dispatched."""
        self.sizes[j], self.examined[j] = n, 0
        self.live += n

    def start_step(self) -> None:
        """A new learner step starts collecting."""
        self.seen, self.filtered = [], 0

    def exhausted(self) -> bool:
        """The step used its ``max_gen_batches`` batches and examined all their groups."""
        k = self.ds.max_gen_batches
        return (
            bool(k)
            and len(self.seen) >= k
            and all(self.examined[j] == self.sizes[j] for j in self.seen)
        )

    def admits(self, j: int) -> bool:
        """The current step may examine a group of batch ``j`` (not a (k+1)-th batch)."""
        k = self.ds.max_gen_batches
        return not k or j in self.seen or len(self.seen) < k

    def examine(self, j: int, counted: bool = True) -> None:
        """The learner took a group of batch ``j`` out of the ready queue; ``counted``
        False (a group dropped as stale) does not make ``j`` one of the step's rounds."""
        if counted and j not in self.seen:
            self.seen.append(j)
        self.examined[j] += 1

    def discard(self, filtered: bool, where: str) -> None:
        """A group will not be trained (filtered, else dropped as stale). Raises
        RuntimeError naming ``where`` when an unlimited step filters without end."""
        self.live -= 1
        if filtered:
            self.filtered += 1
            if not self.ds.max_gen_batches and self.filtered > MAX_FILTERED_PER_STEP:
                raise RuntimeError(
                    f"{where}: dynamic sampling filtered {MAX_FILTERED_PER_STEP} groups "
                    "without B informative ones (pass rates all 0 or 1, or G = 1?); "
                    "set --max-gen-batches"
                )

    def abort(self, kept: int) -> None:
        """The step ends with ``kept < B`` groups: write the missing ones off."""
        self.live += self.B - kept
