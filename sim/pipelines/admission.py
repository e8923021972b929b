"""Admission control of the streaming pipelines (``bounded:S``, ``partial:S``): AReaL's rule.

AReaL (Fu et al. 2025, arXiv 2505.24298, staleness-aware asynchronous RL; FIELD.md)
lets a new rollout start only while

    accepted + running <= (S + v + 1) * B

with ``S`` the staleness bound (AReaL's ``max_head_offpolicyness``), ``v`` the version of
the weights the generators hold (set after each weight update) and ``B`` the learner's
batch size. ``accepted`` counts rollouts that finished and were kept (consumed ones stay
counted: the bound grows by ``B`` per version); ``running`` counts rollouts dispatched and
not yet finished. A rollout that is dropped (here: a group staler than ``S`` at the
learner) leaves ``accepted`` and so frees its place (FIELD.md, AReaL).

Unit here: **groups** (one prompt's G samples, AReaL's "one episode of a GRPO workflow"),
and ``B`` in prompts, so a changing G (SAGC) does not change the bound. With a fixed G
this is the rule in rollouts multiplied by G.

Why this and not "batch ``j`` may start while ``j - v <= S``": the batch-index rule keeps
counting a dropped group as a batch member, so every drop shrinks the pool of groups in
flight for good and the pipeline slowly loses its lead (measured: ``bounded:4`` staleness
drifting from 3.5 to 1.4 over 200 steps). No framework we know uses the batch-index rule
for a streaming pipeline; the batch-serial pipelines (``one-step-off``, ``interval:S``)
never drop and keep it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Admission:
    """Counters of AReaL's admission rule for one run (module docstring); unit: groups.

    Life cycle of a group: :meth:`start` (dispatched) -> :meth:`finish` (all its samples
    done: running -> accepted) -> consumed (stays accepted) or :meth:`drop` (leaves
    accepted); a group discarded while still running (tail abort) is :meth:`abort`-ed.
    Every call appends ``(accepted, running, v)`` to :attr:`log` when ``record`` is set,
    so that a test can check the inequality at every event.
    """

    S: int
    """Staleness bound in learner versions (>= 0)."""
    B: int
    """Learner batch size in groups (>= 1)."""
    accepted: int = 0
    running: int = 0
    record: bool = False
    log: list[tuple[int, int, int]] = field(default_factory=list)
    """``(accepted, running, v)`` after every event (only with ``record``)."""

    def __post_init__(self) -> None:
        if self.S < 0 or self.B < 1:
            raise ValueError(f"Admission: need S >= 0 and B >= 1, got S={self.S}, B={self.B}")

    def bound(self, v: int) -> int:
        """``(S + v + 1) * B`` groups, at generator version ``v``."""
        return (self.S + v + 1) * self.B

    def capacity(self, v: int) -> int:
        """Groups that may start now: ``bound(v) - (accepted + running)`` (may be <= 0)."""
        return self.bound(v) - (self.accepted + self.running)

    def _note(self, v: int) -> None:
        if self.record:
            self.log.append((self.accepted, self.running, v))

    def start(self, n: int, v: int) -> None:
        """``n`` groups dispatched at version ``v``. Raises RuntimeError if that breaks the
        rule (a caller bug: dispatch at most :meth:`capacity`)."""
        if n > self.capacity(v):
            raise RuntimeError(
                f"Admission: {n} groups started with capacity {self.capacity(v)} "
                f"(accepted {self.accepted}, running {self.running}, v {v})"
            )
        self.running += n
        self._note(v)

    def finish(self, v: int) -> None:
        """A group finished generating: running -> accepted."""
        self.running -= 1
        self.accepted += 1
        self._note(v)

    def drop(self, v: int) -> None:
        """A finished group was dropped (stale): it leaves ``accepted``, freeing a place."""
        self.accepted -= 1
        self._note(v)

    def abort(self, v: int) -> None:
        """A running group was discarded before finishing: it leaves ``running``."""
        self.running -= 1
        self._note(v)
