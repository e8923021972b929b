"""Synchronous and asynchronous training pipelines with staleness accounting.

Every pipeline of :mod:`sim.pipelines.spec` is one SimPy *dispatcher* and one *learner*
around the shared :class:`sim.engine.core.Engine` (rules per kind: docs/pipelines.md):

- dispatcher: for prompt batch ``j`` it waits for admission (batch-serial kinds:
  ``j - v_gen <= lead`` and batch ``j-1`` done generating; streaming kinds: AReaL's
  rule, :mod:`sim.pipelines.admission`, the batch then holds at most the free capacity), then
  ``G = controller.propose()`` (:func:`sim.control.observation.propose_step`, with the batch's
  prompt ids for a controller that asks for them) and submits the batch (``B`` or ``ceil(R B)`` prompts,
  lengths from :func:`sim.models.dynamics.step_lengths` keyed on ``(seed, prompt, j, sample)`` as
  in the synchronous pipeline);
- learner, step ``t`` (learner version ``t``): takes the first ``B`` complete groups in
  completion order, dropping any with ``t - policy_version > S_max`` (counted); an
  over-sampling pipeline aborts the rest of the batch (tail abort); trains
  (``cost.learner_step_s(tokens)``); every ``sync_every`` steps a weight sync in the
  pipeline's mode (:mod:`sim.pipelines.weight_sync`: by default it pauses the generators at an
  iteration boundary and takes ``cost.weight_sync_s()``) sets ``v_gen = t + 1``.
  Colocated placement also pauses generation while training.
- :func:`sim.control.observation.observe_step` gets a batch's lengths (and rewards, prompt ids;
  groups consumed or dropped, by prompt) once its last group is consumed, dropped or
  aborted, with the generation and step times of the learner step that resolved it.

Rewards (a pass-rate model in ``RunConfig.rewards``): a batch's correctness is drawn at
dispatch, keyed on ``(seed, j, prompt, sample)`` like its lengths, at the pass rates of
the generators' weights (a copy of the learning model taken at each weight sync; a
partial rollout keeps its dispatch-time pass rate). The learner's update gets the
trained groups' rewards and their staleness ``t - policy_version``.

Dynamic sampling (``RunConfig.dynamic``; not with ``oversample:R``): admission and batch
sizes count groups instead of batches, the learner filters homogeneous groups, and a
step may abort after ``max_gen_batches`` batches (:mod:`sim.pipelines.async_dynamic`). Filtered
groups are not written to the rollout table; they are counted in the step row and the
ledger (``filtered``).

Versions and rows: :mod:`sim.pipelines.async_rows` (a non-partial rollout finishes under the
weights it started with, a modelling choice; a partial one carries its last token's
version) and :mod:`sim.pipelines.rollout_versions` (versions per token, would-be lengths).
``groupover:N/K`` trims groups (:mod:`sim.pipelines.groupover`); ``--park`` re-runs an
over-sampled batch's unfinished prompts as a later long-tail batch (:meth:`_tail_abort`).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import polars as pl
import simpy
from rolloutlab.sim.control.contract import Controller
from rolloutlab.sim.control.observation import propose_step
from rolloutlab.sim.engine.batch import Batch
from rolloutlab.sim.engine.core import Engine
from rolloutlab.sim.models.dynamics import step_lengths
from rolloutlab.sim.models.reward_metrics import informative
from rolloutlab.sim.models.rewards import RewardTracker
from rolloutlab.sim.pipelines.admission import Admission
from rolloutlab.sim.pipelines.async_dynamic import AsyncRounds
from rolloutlab.sim.pipelines.async_ledger import (
    BatchInfo,
    GroupState,
    Ledger,
    group_rewards,
)
from rolloutlab.sim.pipelines.async_resolution import GroupResolution
from rolloutlab.sim.pipelines.groupover import extra_rows, kept_index, trim
from rolloutlab.sim.pipelines.long_round import LongRound
from rolloutlab.sim.pipelines.multi_turn import MultiTurnRun
from rolloutlab.sim.pipelines.rollout_versions import VersionClock, record_progress
from rolloutlab.sim.pipelines.spec import PipelineConfig
from rolloutlab.sim.pipelines.sync import RunConfig, columns_to_rollouts
from rolloutlab.sim.pipelines.weight_sync import Resumer, after_sync, submit_batch, weight_sync
from rolloutlab.sim.scenario.scenario import Scenario
from rolloutlab.sim.trace.metrics import with_cut_columns
from rolloutlab.sim.trace.schema import STEP_SCHEMA

MAX_DROPS_PER_STEP = 1000
"""Stale groups, per group of the batch, one learner step may drop before the run is
declared starved (a drop frees its admission place, so a learner that drops every group
would otherwise wait forever while the dispatcher refills)."""


def run_pipeline(
    scenario: Scenario,
    controller: Controller,
    cfg: RunConfig,
    pipeline: PipelineConfig,
    on_step=None,
    turns: list[pl.DataFrame] | None = None,
    log=None,
) -> tuple[pl.DataFrame, pl.DataFrame, Ledger]:
    """Simulate ``cfg.steps`` learner steps of ``pipeline``; return ``(rollouts, steps, ledger)``.
    With a ``multi_turn`` scenario its turns table is appended to ``turns`` when given;
    ``log`` (:class:`sim.models.update_log.UpdateLog`) gets the learner's updates.

    ``rollouts`` (trace schema) holds every consumed rollout and every dropped or aborted
    one (``finish_reason == "abort"``), sorted by ``(step, prompt_id, sample_idx)``;
    rollouts still buffered or generating when the last step ends are only counted in
    the :class:`Ledger`. ``on_step(step, G)`` is called after each learner step.
    Raises ValueError if the controller proposes G < 1 or for ``async:S`` (see
    :func:`sim.pipelines.async_stream.run_stream`), RuntimeError if the learner can never fill a
    batch (every admissible group was dropped).
    """
    if pipeline.kind == "async":
        raise ValueError("pipeline async:S runs in sim.pipelines.async_stream.run_stream")
    sim = PipelineSimulation(scenario, controller, cfg, pipeline, on_step)
    sim.tracker.log = log
    rollouts, steps, ledger = sim.run()
    if sim.mt is not None and turns is not None:  # multi-turn (sim.pipelines.multi_turn)
        turns.append(sim.mt.keyed_by_rollouts(cfg.run_id, rollouts))
    return rollouts, steps, ledger


class PipelineSimulation(GroupResolution):
    """One run of a pipeline (module doc): SimPy dispatcher and learner around an
    :class:`~sim.engine.core.Engine`; :meth:`run` returns ``(rollouts, steps, ledger)``.
    Subclassed by :class:`sim.pipelines.async_stream.StreamSimulation`."""

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
        self.clock = VersionClock()  # when v_gen changed (sim.pipelines.rollout_versions)
        self.batches: list[BatchInfo] = []
        self.ready: deque[GroupState] = deque()
        self.ready_evt = self.env.event()
        self.changed = self.env.event()
        self.long = LongRound(cfg.prompts, pipeline.route, cfg.dataset_size)  # --park, route=F
        self.columns: list[dict[str, np.ndarray]] = []
        self.steps: list[dict] = []
        self.ledger = Ledger()
        self.info_of: dict[int, BatchInfo] = {}  # id(engine batch) -> its batch info
        self.discarded: list[GroupState] = []
        self.tracker = RewardTracker(
            cfg.rewards, cfg.seed, cfg.lr, cfg.prompts, cfg.updates_per_batch
        )
        self.gen_model = self.tracker.behaviour_copy()  # learning model of the generators
        if cfg.dynamic is not None and pipeline.kind == "oversample":
            raise ValueError(
                f"pipeline {pipeline.spec}: dynamic sampling over-samples already; "
                "use --gen-batch-factor with another pipeline"
            )
        self.rounds = AsyncRounds(cfg.dynamic, cfg.prompts, pipeline.lead) if cfg.dynamic else None
        self.admission = (  # AReaL's rule for the streaming kinds (sim.pipelines.admission)
            Admission(pipeline.S, cfg.prompts, record=True)
            if pipeline.streaming and self.rounds is None
            else None
        )
        self.ledger.admission = self.admission
        self.filtered_now: list[GroupState] = []  # groups the current step filtered
        self.holding = False  # a drain sync holds new submissions (sim.pipelines.weight_sync)
        self.resumer = Resumer()  # rollouts to launch again (abort sync, chunks)
        self.mt = MultiTurnRun(self.env, self.engine, scenario) if scenario.multi_turn else None

    def run(self):
        """Run the simulation to ``cfg.steps`` learner steps; returns ``(rollouts, steps, ledger)``."""
        self.env.process(self._dispatcher())
        learner = self.env.process(self._learner())
        while not learner.processed:  # as env.run(until=learner), telling a stall apart
            if self.env.peek() == math.inf:  # nothing left to happen; the learner waits
                if self.resumer.relaunch():  # chunk-paused rollouts: nothing else can run
                    continue
                raise self._starved()
            self.env.step()
        self.columns.extend(
            self.ledger.account_leftovers(self.discarded, self.batches, self._columns)
        )
        if self.pc.trims:
            groups = [g for info in self.batches for g in info.groups]
            self.columns.extend(extra_rows(groups, self.batches, self._columns, self.ledger))
        rollouts = columns_to_rollouts(self.columns).sort(
            "step", "prompt_id", "sample_idx", maintain_order=True
        )
        steps = pl.DataFrame(self.steps, schema=STEP_SCHEMA)
        if self.pc.n_prompts_factor > 1 or self.pc.trims:  # what the tail cut took
            steps = self.long.annotate(with_cut_columns(steps, rollouts))
        return rollouts, steps, self.ledger

    # --- generator side ---------------------------------------------------------------
    def _poke(self) -> None:
        """Wake the dispatcher: admission may have changed."""
        if not self.changed.triggered:
            self.changed.succeed()

    def _admissible(self, j: int) -> bool:
        if self.holding:
            return False
        if self.rounds is not None:  # counted in groups (sim.pipelines.async_dynamic)
            if not self.rounds.admissible(self.v_gen):
                return False
        elif self.admission is not None:
            return self.admission.capacity(self.v_gen) > 0
        elif j - self.v_gen > self.pc.lead:
            return False
        return self.pc.streaming or j == 0 or self.batches[j - 1].generating == 0

    def _dispatcher(self):
        B, cap_tokens = self.cfg.prompts, self.sc.prompt_tokens
        n_fixed = math.ceil(self.pc.n_prompts_factor * B - 1e-9)
        j = 0
        while True:
            while not self._admissible(j):
                self.changed = self.env.event()
                yield self.changed
            if self.rounds is not None:
                n_prompts = self.rounds.batch_size(self.v_gen)
            elif self.admission is not None:
                n_prompts = min(n_fixed, self.admission.capacity(self.v_gen))
                self.admission.start(n_prompts, self.v_gen)
            else:
                n_prompts = n_fixed
            prompt_ids, n_prompts = self.long.next_ids(n_prompts, self.env.now)  # long round?
            G = propose_step(self.ctl, prompt_ids)
            if G < 1:
                raise ValueError(f"controller {self.ctl.name} proposed G={G} for batch {j}")
            G, keep = self.pc.launched(G), G  # groupover: more launched than kept
            # keyed on (seed, prompt, batch, sample): with n_prompts = B, batch j draws what
            # synchronous step j draws (common random numbers across pipelines)
            lengths = step_lengths(self.sc.lengths, self.cfg.seed, j, prompt_ids, G)  # (n, G)
            correct = (
                self.tracker.draw(j, prompt_ids, G, lengths, self.gen_model)
                if self.tracker.enabled
                else None
            )
            if self.mt is not None:  # multi-turn: lengths = tokens over all turns, as they end
                batch, lengths = self.mt.dispatch(self.cfg.seed, j, prompt_ids, G, self._on_finish)
            else:
                keys, prompts = np.repeat(prompt_ids, G), np.full(n_prompts * G, cap_tokens)
                batch = submit_batch(self, keys, prompts, lengths.ravel())
            info = BatchInfo.new(j, G, keep, batch, lengths, prompt_ids, self.v_gen, correct)
            self.info_of[id(batch)] = info
            self.batches.append(info)
            self.ledger.dispatched += n_prompts * G
            if self.rounds is not None:
                self.rounds.dispatched(j, n_prompts)
            j += 1

    def _on_finish(self, batch: Batch, i: int, t: float) -> None:
        info = self.info_of[id(batch)]
        info.v_last[i] = self.v_gen
        group = info.groups[i // info.G]
        group.n_done += 1
        self.long.observe(group.prompt_id, int(batch.response_tokens[i]))  # (TurnBatch too)
        if group.trimmed and len(group.kept) < group.keep:
            group.kept.append(i)
        if group.status == "running" and group.n_done == group.keep:
            group.status = "ready"
            if group.trimmed:  # the first keep finished: abort the rest
                trim(self.engine, info, group)
            info.generating -= 1
            if self.admission is not None:
                self.admission.finish(self.v_gen)
            self.ready.append(group)
            if not self.ready_evt.triggered:
                self.ready_evt.succeed()
            self._poke()

    def _version(self, g: GroupState) -> int:
        """Policy version of a group: dispatch version, or its oldest last token (partial)."""
        if not self.pc.partial:
            return g.v_dispatch
        info = self.batches[g.j]
        return int(info.v_last[g.lo : g.lo + g.G].min())

    # --- learner side -----------------------------------------------------------------
    def _learner(self):
        env, cost = self.env, self.sc.cost
        for t in range(self.cfg.steps):
            taken = yield from self._take(t)
            if self.pc.kind == "oversample":
                self._tail_abort(taken, t)
            if cost.gen_overhead_s > 0:  # per generation phase, as in run_sync
                yield env.timeout(cost.gen_overhead_s)
            paused = False
            if self.pc.placement == "colocated":
                yield self.engine.pause()
                paused = True
            tokens = sum(
                int(self.batches[g.j].batch.response_tokens[kept_index(g)].sum())
                + g.keep * self.sc.prompt_tokens
                for g in taken
            )
            train_time = cost.learner_step_s(float(tokens)) if taken else 0.0
            yield env.timeout(train_time)
            for g in taken:
                self._resolve(g, "consumed", t)
            parts = None
            if not taken and (t + 1) % self.pc.sync_every == 0:  # aborted, nothing trained:
                self._set_version(t + 1)  # the weights did not change, nothing to send
                after_sync(self)
            elif (t + 1) % self.pc.sync_every == 0:  # sim.pipelines.weight_sync: mode, parts
                paused, parts = yield from weight_sync(self, paused)
                if self.pc.partial:  # workers held: tokens made under the old weights
                    record_progress(self.engine, self.info_of)
                self._set_version(t + 1)
                after_sync(self)
            rewards = self._learn(taken, t)
            if (t + 1) % self.pc.sync_every == 0:
                self.gen_model = self.tracker.behaviour_copy()
            self._record_step(t, taken, env.now, train_time, parts, rewards)
            if paused:
                self.engine.resume()
            if t + 1 < self.cfg.steps:
                self._poke()
            if self.on_step is not None:
                self.on_step(t, taken[0].keep if taken else self.batches[-1].groups[0].keep)

    def _starved(self) -> RuntimeError:
        return RuntimeError(
            f"pipeline {self.pc.spec}: the learner cannot fill a batch of "
            f"{self.cfg.prompts} groups (all admissible groups dropped as stale)"
        )

    def _set_version(self, v: int) -> None:
        self.v_gen = v
        self.clock.change(self.env.now, v)

    def _take(self, t: int):
        """Collect step ``t``'s groups from the ready queue (a SimPy generator returning
        the taken list): stale ones dropped; with dynamic sampling homogeneous ones
        filtered and the step's rounds capped (:class:`sim.pipelines.async_dynamic.AsyncRounds`)."""
        B, r = self.cfg.prompts, self.rounds
        taken: list[GroupState] = []
        deferred: list[GroupState] = []
        n_dropped = 0
        self.filtered_now = []
        if r is not None:
            r.start_step()
        while len(taken) < B and not (r is not None and r.exhausted()):
            while not self.ready:
                self.ready_evt = self.env.event()
                yield self.ready_evt
            g = self.ready.popleft()
            stale = t - self._version(g) > self.pc.max_staleness
            if r is not None:
                if not stale and not r.admits(g.j):  # a (k+1)-th batch: for the next step
                    deferred.append(g)
                    continue
                r.examine(g.j, counted=not stale)
            if stale:
                n_dropped += 1
                if n_dropped > MAX_DROPS_PER_STEP * B:  # drops free admission: no stall
                    raise self._starved()
                self._discard(g, "dropped", t)
                if r is not None:
                    r.discard(False, f"pipeline {self.pc.spec}")
            elif r is not None and not informative(group_rewards(self.batches, g)[None])[0]:
                self._resolve(g, "filtered", t)
                self.filtered_now.append(g)
                r.discard(True, f"pipeline {self.pc.spec}")
                self._poke()
            else:
                taken.append(g)
        self.ready.extendleft(reversed(deferred))
        if r is not None and len(taken) < B:
            r.abort(len(taken))
        return taken

    def _learn(self, taken: list[GroupState], t: int) -> list[np.ndarray] | None:
        """Learning-model update with the trained groups; returns their rewards."""
        if not self.tracker.enabled:
            return None
        rewards = [group_rewards(self.batches, g) for g in taken]
        stale = np.array([t - self._version(g) for g in taken], dtype=np.int64)
        self.tracker.learn(rewards, t, stale)
        return rewards
