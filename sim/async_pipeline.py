"""Synchronous and asynchronous training pipelines with staleness accounting.

Every pipeline of :mod:`sim.pipeline_spec` is one SimPy *dispatcher* and one *learner*
around the shared :class:`sim.engine.Engine` (rules per kind: docs/pipelines.md):

- dispatcher: for prompt batch ``j`` it waits for admission (``j - v_gen <= lead``;
  batch-serial kinds also wait for batch ``j-1`` to finish generating), then
  ``G = controller.propose()`` and submits the batch (``B`` or ``ceil(R B)`` prompts,
  lengths from :func:`sim.dynamics.step_lengths` keyed on ``(seed, prompt, j, sample)`` as
  in the synchronous pipeline);
- learner, step ``t`` (learner version ``t``): takes the first ``B`` complete groups in
  completion order, dropping any with ``t - policy_version > S_max`` (counted); an
  over-sampling pipeline aborts the rest of the batch (tail abort); trains
  (``cost.learner_step_s(tokens)``); every ``sync_every`` steps a weight sync pauses the
  generators at an iteration boundary, takes ``cost.weight_sync_s()`` and sets
  ``v_gen = t + 1``. Colocated placement also pauses generation while training.
- ``controller.observe(lengths)`` gets a batch's lengths (groups consumed or dropped, by
  prompt) once its last group is consumed, dropped or aborted.

Versions: a non-partial rollout carries the version it was dispatched with (modelling
choice: in-flight rollouts finish under the weights they started with; the sync only
pauses them); a partial rollout keeps running across syncs and carries the version of
its last token (its dispatch version is kept in the ledger, not in the trace).
A dropped or tail-aborted rollout is written with ``finish_reason = "abort"``;
``response_tokens`` = tokens generated; ``learner_version`` = the step that discarded it;
``policy_version`` = its group's version (for a partial group: its oldest sample's), so
that ``learner_version - policy_version > S_max`` tells a stale drop from a tail abort.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import simpy
from rolloutlab.sim.batch import Batch
from rolloutlab.sim.controllers import Controller
from rolloutlab.sim.dynamics import step_lengths
from rolloutlab.sim.engine import Engine
from rolloutlab.sim.pipeline import RunConfig, columns_to_rollouts, rollout_columns, step_record
from rolloutlab.sim.pipeline_spec import PipelineConfig
from rolloutlab.sim.scenario import Scenario
from rolloutlab.sim.trace import STEP_SCHEMA


@dataclass
class _Group:
    """One prompt's G rollouts: requests ``lo .. lo+G-1`` of batch ``j``'s :class:`Batch`."""

    j: int
    prompt_id: int
    lo: int
    G: int
    v_dispatch: int
    n_done: int = 0
    status: str = "running"  # running | ready | consumed | dropped | aborted
    step: int = -1  # learner step that consumed / discarded it


@dataclass
class _BatchInfo:
    """A dispatched prompt batch: its engine batch, groups and per-rollout last-token version."""

    j: int
    G: int
    batch: Batch
    lengths: np.ndarray  # (n_prompts, G) response tokens
    groups: list[_Group]
    v_last: np.ndarray  # (n_prompts * G,) v_gen at each rollout's finish
    observed: bool = False
    unresolved: int = 0
    generating: int = 0  # groups not yet complete nor discarded


@dataclass
class Ledger:
    """Where every dispatched rollout ended (counts of rollouts) and version spans."""

    dispatched: int = 0
    consumed: int = 0
    dropped: int = 0
    """Rollouts of groups discarded as staler than ``S_max``."""
    aborted: int = 0
    """Rollouts of groups discarded by the over-sampling tail abort."""
    ready: int = 0
    """Finished, waiting in the buffer at the end."""
    in_flight: int = 0
    """Queued or running at the end (or aborted but not yet removed)."""
    spanned_versions: list[int] = field(default_factory=list)
    """Per consumed rollout: last-token version minus dispatch version (partial rollouts)."""

    def as_dict(self) -> dict:
        """Counts plus ``spanned_versions_mean`` / ``_max`` (0 when none consumed)."""
        span = np.asarray(self.spanned_versions, dtype=float)
        return {
            "dispatched": self.dispatched,
            "consumed": self.consumed,
            "dropped": self.dropped,
            "aborted": self.aborted,
            "ready": self.ready,
            "in_flight": self.in_flight,
            "spanned_versions_mean": float(span.mean()) if span.size else 0.0,
            "spanned_versions_max": int(span.max()) if span.size else 0,
        }


class _Rows:
    """The rows of one group (or a whole batch) in the shape :func:`rollout_columns` reads."""

    def __init__(self, batch: Batch, sl: slice):
        self.prompt_tokens = batch.prompt_tokens[sl]
        self.response_tokens = batch.response_tokens[sl]
        self.worker = batch.worker[sl]
        self.t_submit = batch.t_submit[sl]
        self.t_first_token = batch.t_first_token[sl]
        self.t_finish = batch.t_finish[sl]


def run_pipeline(
    scenario: Scenario,
    controller: Controller,
    cfg: RunConfig,
    pipeline: PipelineConfig,
    on_step=None,
) -> tuple[pl.DataFrame, pl.DataFrame, Ledger]:
    """Simulate ``cfg.steps`` learner steps of ``pipeline``; return ``(rollouts, steps, ledger)``.

    ``rollouts`` (trace schema) holds every consumed rollout and every dropped or aborted
    one (``finish_reason == "abort"``), sorted by ``(step, prompt_id, sample_idx)``;
    rollouts still buffered or generating when the last step ends are only counted in
    the :class:`Ledger`. ``on_step(step, G)`` is called after each learner step.
    Raises ValueError if the controller proposes G < 1, RuntimeError if the learner
    can never fill a batch (every admissible group was dropped).
    """
    sim = _Simulation(scenario, controller, cfg, pipeline, on_step)
    return sim.run()


class _Simulation:
    def __init__(self, scenario, controller, cfg, pipeline, on_step):
        self.sc, self.ctl, self.cfg, self.pc, self.on_step = (
            scenario,
            controller,
            cfg,
            pipeline,
            on_step,
        )
        self.env = simpy.Environment()
        self.engine = Engine(self.env, scenario.cost, scenario.engine)
        self.v_gen = 0
        self.batches: list[_BatchInfo] = []
        self.ready: deque[_Group] = deque()
        self.ready_evt = self.env.event()
        self.changed = self.env.event()
        self.next_prompt = 0
        self.columns: list[dict[str, np.ndarray]] = []
        self.steps: list[dict] = []
        self.ledger = Ledger()
        self.info_of: dict[int, _BatchInfo] = {}  # id(engine batch) -> its batch info
        self.discarded: list[_Group] = []

    def run(self):
        self.env.process(self._dispatcher())
        learner = self.env.process(self._learner())
        while not learner.processed:  # as env.run(until=learner), telling a stall apart
            if self.env.peek() == math.inf:  # nothing left to happen; the learner waits
                raise RuntimeError(
                    f"pipeline {self.pc.spec}: the learner cannot fill a batch of "
                    f"{self.cfg.prompts} groups (all admissible groups dropped as "
                    "stale)"
                )
            self.env.step()
        self._account_leftovers()
        rollouts = columns_to_rollouts(self.columns).sort(
            "step", "prompt_id", "sample_idx", maintain_order=True
        )
        return rollouts, pl.DataFrame(self.steps, schema=STEP_SCHEMA), self.ledger

    # --- generator side ---------------------------------------------------------------
    def _poke(self) -> None:
        """Wake the dispatcher: admission may have changed."""
        if not self.changed.triggered:
            self.changed.succeed()

    def _admissible(self, j: int) -> bool:
        if j - self.v_gen > self.pc.lead:
            return False
        return self.pc.streaming or j == 0 or self.batches[j - 1].generating == 0

    def _dispatcher(self):
        B, cap_tokens = self.cfg.prompts, self.sc.prompt_tokens
        n_prompts = math.ceil(self.pc.n_prompts_factor * B - 1e-9)
        j = 0
        while True:
            while not self._admissible(j):
                self.changed = self.env.event()
                yield self.changed
            G = int(self.ctl.propose())
            if G < 1:
                raise ValueError(f"controller {self.ctl.name} proposed G={G} for batch {j}")
            prompt_ids = self.next_prompt + np.arange(n_prompts)
            # keyed on (seed, prompt, batch, sample): with n_prompts = B, batch j draws what
            # synchronous step j draws (common random numbers across pipelines)
            lengths = step_lengths(self.sc.lengths, self.cfg.seed, j, prompt_ids, G)  # (n, G)
            self.next_prompt += n_prompts
            batch = self.engine.submit(
                np.repeat(prompt_ids, G),
                np.full(n_prompts * G, cap_tokens),
                lengths.ravel(),
                on_finish=self._on_finish,
            )
            groups = [_Group(j, int(p), k * G, G, self.v_gen) for k, p in enumerate(prompt_ids)]
            info = _BatchInfo(
                j,
                G,
                batch,
                lengths,
                groups,
                np.full(n_prompts * G, -1, dtype=np.int64),
                unresolved=n_prompts,
                generating=n_prompts,
            )
            self.info_of[id(batch)] = info
            self.batches.append(info)
            self.ledger.dispatched += n_prompts * G
            j += 1

    def _on_finish(self, batch: Batch, i: int, t: float) -> None:
        info = self.info_of[id(batch)]
        info.v_last[i] = self.v_gen
        group = info.groups[i // info.G]
        group.n_done += 1
        if group.status == "running" and group.n_done == group.G:
            group.status = "ready"
            info.generating -= 1
            self.ready.append(group)
            if not self.ready_evt.triggered:
                self.ready_evt.succeed()
            self._poke()

    def _version(self, g: _Group) -> int:
        """Policy version of a group: dispatch version, or its oldest last token (partial)."""
        if not self.pc.partial:
            return g.v_dispatch
        info = self.batches[g.j]
        return int(info.v_last[g.lo : g.lo + g.G].min())

    # --- learner side -----------------------------------------------------------------
    def _learner(self):
        env, cost, B = self.env, self.sc.cost, self.cfg.prompts
        for t in range(self.cfg.steps):
            taken: list[_Group] = []
            while len(taken) < B:
                while not self.ready:
                    self.ready_evt = env.event()
                    yield self.ready_evt
                g = self.ready.popleft()
                if t - self._version(g) > self.pc.max_staleness:
                    self._discard(g, "dropped", t)
                else:
                    taken.append(g)
            if self.pc.kind == "oversample":
                self._tail_abort(taken, t)
            if cost.gen_overhead_s > 0:  # per generation phase, as in run_sync
                yield env.timeout(cost.gen_overhead_s)
            paused = False
            if self.pc.placement == "colocated":
                yield self.engine.pause()
                paused = True
            tokens = sum(
                int(self.batches[g.j].lengths[(g.lo // g.G)].sum()) + g.G * self.sc.prompt_tokens
                for g in taken
            )
            train_time = cost.learner_step_s(float(tokens))
            yield env.timeout(train_time)
            for g in taken:
                self._resolve(g, "consumed", t)
            sync_time = 0.0
            if (t + 1) % self.pc.sync_every == 0:
                t_sync = env.now
                if not paused:
                    yield self.engine.pause()  # generators stop at an iteration boundary
                    paused = True
                wait_s = env.now - t_sync
                sync_time = cost.weight_sync_s() + wait_s if wait_s > 0 else cost.weight_sync_s()
                yield env.timeout(cost.weight_sync_s())
                self.v_gen = t + 1
            self._observe_resolved()
            self._record_step(t, taken, env.now, train_time, sync_time)
            if paused:
                self.engine.resume()
            if t + 1 < self.cfg.steps:
                self._poke()
            if self.on_step is not None:
                self.on_step(t, taken[0].G)

    def _record_step(self, t, taken, t_end, train_time, sync_time):
        taken = sorted(taken, key=lambda g: g.prompt_id)
        cols = [self._columns(g, t, "consumed") for g in taken]
        self.columns.extend(cols)
        t_start = min(float(c["t_submit"].min()) for c in cols)
        last = max(float(c["t_finish"].max()) for c in cols)
        overhead = self.sc.cost.gen_overhead_s
        gen_time = (
            last + overhead if overhead > 0 else last
        ) - t_start  # = run_sync's, bit for bit
        self.steps.append(
            step_record(
                self.cfg.run_id,
                t,
                t_start,
                t_end,
                gen_time,
                train_time,
                sync_time,
                self.cfg.lr,
                self.ctl,
            )
        )

    def _columns(self, g: _Group, step: int, status: str) -> dict[str, np.ndarray]:
        info = self.batches[g.j]
        sl = slice(g.lo, g.lo + g.G)
        version = info.v_last[sl] if self.pc.partial else g.v_dispatch
        cols = rollout_columns(
            self.cfg.run_id,
            step,
            g.G,
            np.array([g.prompt_id]),
            _Rows(info.batch, sl),
            version,
            step,
            self.sc.lengths.max_response_length,
        )
        if status != "consumed":
            b = info.batch
            cols["response_tokens"] = np.where(
                b.aborted[sl], b.abort_tokens[sl], b.response_tokens[sl]
            )
            cols["finish_reason"] = np.full(g.G, "abort", dtype=object)
            if self.pc.partial:  # a discarded group is as old as its oldest sample
                cols["policy_version"] = np.full(
                    g.G, self._version(g) if status == "dropped" else g.v_dispatch, dtype=np.int64
                )
        return cols

    def _resolve(self, g: _Group, status: str, step: int) -> None:
        info = self.batches[g.j]
        if g.status == "running":
            info.generating -= 1
        g.status, g.step = status, step
        info.unresolved -= 1
        if status == "consumed":
            self.ledger.consumed += g.G
            sl = slice(g.lo, g.lo + g.G)
            version = info.v_last[sl] if self.pc.partial else np.full(g.G, g.v_dispatch)
            self.ledger.spanned_versions.extend((version - g.v_dispatch).tolist())

    def _discard(self, g: _Group, status: str, step: int) -> None:
        """Drop a stale ready group, or abort an over-sampled one (running or ready)."""
        info = self.batches[g.j]
        if g.status == "running":
            pending = [i for i in range(g.lo, g.lo + g.G) if np.isnan(info.batch.t_finish[i])]
            self.engine.abort(info.batch, pending)
        self._resolve(g, status, step)
        self.discarded.append(g)
        self._poke()

    def _tail_abort(self, taken: list[_Group], t: int) -> None:
        keep = {id(g) for g in taken}
        for j in sorted({g.j for g in taken}):
            for g in self.batches[j].groups:
                if id(g) not in keep and g.status in ("running", "ready"):
                    if g.status == "ready":
                        self.ready.remove(g)
                    self._discard(g, "aborted", t)

    def _observe_resolved(self) -> None:
        for info in self.batches:
            if info.unresolved == 0 and not info.observed:
                info.observed = True
                lengths = [
                    info.lengths[k].tolist()
                    for k, g in enumerate(info.groups)
                    if g.status in ("consumed", "dropped")
                ]
                self.ctl.observe(lengths)

    def _account_leftovers(self) -> None:
        """Write discarded groups' finished rows; count the rest into the ledger."""
        for g in self.discarded:
            b, sl = self.batches[g.j].batch, slice(g.lo, g.lo + g.G)
            done = ~np.isnan(b.t_finish[sl])  # (G,) removed or finished by the end
            cols = self._columns(g, g.step, g.status)
            self.columns.append({k: v[done] for k, v in cols.items()})
            n_done = int(done.sum())
            if g.status == "dropped":
                self.ledger.dropped += n_done
            else:
                self.ledger.aborted += n_done
            self.ledger.in_flight += g.G - n_done
        for info in self.batches:
            for g in info.groups:
                if g.status == "ready":
                    self.ledger.ready += g.G
                elif g.status == "running":
                    self.ledger.ready += g.n_done
                    self.ledger.in_flight += g.G - g.n_done
