"""How the asynchronous pipelines resolve groups and record a learner step: a group
consumed, filtered, dropped as too stale or aborted (ledger counts, admission places,
engine aborts), the tail abort of over-sampled batches, and the step's rollout and step
rows (docs/pipelines.md).

Interface: :class:`GroupResolution`, the base of
:class:`sim.pipelines.async_pipeline.PipelineSimulation`; it uses that class's state
(``batches``, ``ledger``, ``engine``, ``admission``, ``ready``, ``long``, ``columns``,
``steps``, ``ctl``, ``sc``, ``cfg``, ``pc``, ``clock``, ``rounds``, ``filtered_now``,
``discarded``, ``v_gen``) and its ``_poke``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np
from rolloutlab.sim.engine.core import Engine
from rolloutlab.sim.pipelines.async_ledger import BatchInfo, GroupState, Ledger, observe_resolved
from rolloutlab.sim.pipelines.async_rows import group_rows, reward_columns
from rolloutlab.sim.pipelines.segments import abort_requests
from rolloutlab.sim.pipelines.sync import step_record

if TYPE_CHECKING:
    from rolloutlab.sim.pipelines.admission import Admission
    from rolloutlab.sim.pipelines.long_round import LongRound
    from rolloutlab.sim.pipelines.rollout_versions import VersionClock


class GroupResolution:
    """Group resolution and step recording of a pipeline simulation (module doc); not
    used alone."""

    # the state it shares with PipelineSimulation (set in its __init__)
    sc: Any
    ctl: Any
    cfg: Any
    pc: Any
    engine: Engine
    batches: list[BatchInfo]
    ready: deque[GroupState]
    long: LongRound
    columns: list[dict[str, np.ndarray]]
    steps: list[dict]
    ledger: Ledger
    discarded: list[GroupState]
    rounds: Any
    admission: Admission | None
    filtered_now: list[GroupState]
    clock: VersionClock
    v_gen: int

    def _poke(self) -> None:
        """Wake the dispatcher after a group frees its place (defined by the simulation)."""
        raise NotImplementedError

    def _record_step(self, t, taken, t_end, train_time, parts, rewards) -> None:
        """Observe the batches this step resolved, then append the step's rollout rows and
        step row (controller state after observing); ``parts``: the step's
        :class:`sim.pipelines.weight_sync.SyncParts`, ``None`` without a sync."""
        reward_cols = reward_columns(
            rewards, len(taken), self.cfg.prompts, self.rounds, self.batches, self.filtered_now
        )
        taken = sorted(taken, key=lambda g: g.prompt_id)
        cols = [self._columns(g, t, "consumed") for g in taken]
        self.columns.extend(cols)
        spans = cols + [self._columns(g, t, "filtered") for g in self.filtered_now]
        t_start = min((float(c["t_submit"].min()) for c in spans), default=t_end)
        last = max((float(c["t_finish"].max()) for c in spans), default=t_end)
        overhead = self.sc.cost.gen_overhead_s
        gen_time = (
            last + overhead if overhead > 0 else last
        ) - t_start  # = run_sync's, bit for bit
        observe_resolved(
            self.ctl,
            self.batches,
            gen_time,
            t_end - t_start,
            learner_time_s=train_time,
            wall_clock_s=t_end,
            max_response_length=self.sc.lengths.max_response_length,
        )
        self.steps.append(
            step_record(
                self.cfg.run_id,
                t,
                t_start,
                t_end,
                gen_time,
                train_time,
                0.0 if parts is None else parts.total_s,
                self.cfg.lr,
                self.ctl,
                reward_cols,
                None if parts is None else parts.as_tuple(),
            )
        )

    def _columns(self, g: GroupState, step: int, status: str) -> dict[str, np.ndarray]:
        info = self.batches[g.j]
        max_len = self.sc.lengths.max_response_length
        return group_rows(
            info, g, step, status, self.cfg.run_id, max_len, self.pc.partial, self.clock
        )

    def _resolve(self, g: GroupState, status: str, step: int) -> None:
        info = self.batches[g.j]
        if g.status == "running":
            info.generating -= 1
        g.status, g.step = status, step
        info.unresolved -= 1
        if status == "filtered":
            self.ledger.filtered += g.G
        if status == "consumed":
            self.ledger.consumed += g.keep
            sl = slice(g.lo, g.lo + g.G)
            version = info.v_last[sl] if self.pc.partial else np.full(g.keep, g.v_dispatch)
            self.ledger.spanned_versions.extend((version - g.v_dispatch).tolist())

    def _discard(self, g: GroupState, status: str, step: int) -> None:
        """Drop a stale ready group, or abort an over-sampled one (running or ready)."""
        info = self.batches[g.j]
        if g.status == "running":
            pending = [i for i in range(g.lo, g.lo + g.G) if np.isnan(info.batch.t_finish[i])]
            abort_requests(self.engine, info.batch, pending)
        if self.admission is not None:  # a drop frees its place
            (self.admission.abort if g.status == "running" else self.admission.drop)(self.v_gen)
        self._resolve(g, status, step)
        self.discarded.append(g)
        self._poke()

    def _tail_abort(self, taken: list[GroupState], t: int) -> None:
        """Abort the groups of the taken ones' batches that were not taken; with
        ``--park`` (RollPacker) the unfinished ones' prompts are re-run later, ``B`` at a
        time, as a long-tail batch (:meth:`_dispatcher`)."""
        keep = {id(g) for g in taken}
        for j in sorted({g.j for g in taken}):
            for g in self.batches[j].groups:
                if id(g) not in keep and g.status in ("running", "ready"):
                    if g.status == "ready":
                        self.ready.remove(g)
                    elif self.pc.park:
                        self.long.park(g.prompt_id)
                    self._discard(g, "aborted", t)
