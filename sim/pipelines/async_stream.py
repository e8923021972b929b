"""``async:S`` — continuous fully-asynchronous streaming with a rollout queue.

The generators are refilled **one group at a time** (one prompt's G rollouts) as soon as
a group slot is free, and finished groups go into a rollout queue the learner takes from.
Why a group and not a single rollout: a GRPO group is the unit of advantage, so a
rollout is no use to the learner before its siblings finish; verl's fully-async
rollouter feeds one prompt (with its ``n`` responses) at a time (``gen_batch_size = 1``),
AReaL and PipelineRL submit one prompt's group per task as well.

Rules (options of :class:`sim.pipelines.spec.PipelineConfig`; verl names in brackets):

- **group slots**: at most ``concurrency`` groups generating at once (default B);
- **queue**: finished groups wait in a queue of ``queue`` groups [``max_queue_size``,
  by default ``max_required_samples``, else ``(S + 1) B``]; when a group finishes
  into a full queue, ``full=drop_oldest`` drops the oldest queued group [verl's
  ``MessageQueue``], ``full=block`` never lets it happen: a group starts only while
  ``queued + generating < queue`` (the generator blocks);
- **per-version budget** (``threshold=F`` [``staleness_threshold``]): at most
  ``ceil((1 + F) * sync_every * B)`` groups start per weight version
  [``max_required_samples``], counting the groups generating or queued when the version
  arrived (verl resets its count to them at each parameter update);
- **weight sync** every ``sync_every`` learner steps [``trigger_parameter_sync_step``],
  in the pipeline's sync mode (:mod:`sim.pipelines.weight_sync`);
- **staleness cap**, separate from all of the above: the learner drops a group with
  ``t - policy_version > S`` when it takes it (``policy_version``: the weights version
  when the group started).

Prompt batches of B prompts still exist, as the unit the controller proposes G for and
observes: batch ``j``'s G is proposed when its first group is about to start (once every
group of batch ``j - 1`` has started); its lengths and rewards are drawn then.
"""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.pipelines.async_ledger import GroupState
from rolloutlab.sim.pipelines.async_pipeline import PipelineSimulation


def run_stream(scenario, controller, cfg, pipeline, on_step=None, log=None):
    """Simulate ``cfg.steps`` learner steps of an ``async:S`` pipeline; returns
    ``(rollouts, steps, ledger)`` as :func:`sim.pipelines.async_pipeline.run_pipeline` does
    (``log`` too). Raises ValueError for another kind, with dynamic sampling, or for a
    queue capacity below B."""
    if pipeline.kind != "async":
        raise ValueError(f"run_stream runs async:S, got {pipeline.spec}")
    sim = StreamSimulation(scenario, controller, cfg, pipeline, on_step)
    sim.tracker.log = log
    return sim.run()


class StreamSimulation(PipelineSimulation):
    """The ``async:S`` pipeline (module doc): :class:`sim.pipelines.async_pipeline.PipelineSimulation`
    with a group launcher and a bounded rollout queue instead of batch dispatch."""

    def __init__(self, scenario, controller, cfg, pipeline, on_step):
        super().__init__(scenario, controller, cfg, pipeline, on_step)
        if cfg.dynamic is not None:
            raise ValueError(f"pipeline {pipeline.spec}: dynamic sampling is not supported")
        pipeline.check_batch(cfg.prompts)
        B = cfg.prompts
        self.capacity = pipeline.queue_capacity(B)
        self.budget = pipeline.max_required(B)  # groups per version, None = no bound
        self.concurrency = pipeline.concurrency or B
        self.generating = 0  # groups started and not finished
        self.started = 0  # groups started since the current version arrived
        self.cursor = (0, 0)  # (batch, group) of the next group to start
        self.queue_peak = 0  # most groups ever waiting in the queue
        self.queue_dropped = 0  # rollouts dropped by full=drop_oldest
        self.launch_evt = self.env.event()
        self.env.process(self._launcher())

    # --- dispatcher: make batch j once every group before it has started ---------------
    def _admissible(self, j: int) -> bool:
        if self.cursor[0] < len(self.batches):
            return False
        self._wake_launcher()  # the dispatcher appends batch j before the launcher runs
        return True

    def _poke(self) -> None:
        super()._poke()
        self._wake_launcher()

    def _wake_launcher(self) -> None:
        if not self.launch_evt.triggered:
            self.launch_evt.succeed()

    # --- launcher ----------------------------------------------------------------------
    def _may_start(self) -> bool:
        if self.holding or self.cursor[0] >= len(self.batches):
            return False
        if self.generating >= self.concurrency:
            return False
        if self.pc.full == "block" and len(self.ready) + self.generating >= self.capacity:
            return False
        return self.budget is None or self.started < self.budget

    def _launcher(self):
        """Process: start the next group whenever :meth:`_may_start` allows."""
        while True:
            while not self._may_start():
                self.launch_evt = self.env.event()
                yield self.launch_evt
            bj, k = self.cursor
            info = self.batches[bj]
            g: GroupState = info.groups[k]
            g.v_dispatch = self.v_gen
            info.batch.launch(np.arange(g.lo, g.lo + g.G))
            self.generating += 1
            self.started += 1
            self.cursor = (bj, k + 1) if k + 1 < len(info.groups) else (bj + 1, 0)
            if self.cursor[0] > bj:
                self._poke()  # the dispatcher may make the next batch

    # --- queue --------------------------------------------------------------------------
    def _on_finish(self, batch, i: int, t: float) -> None:
        info = self.info_of[id(batch)]
        group = info.groups[i // info.G]
        super()._on_finish(batch, i, t)
        if group.n_done != group.G:
            return
        self.generating -= 1
        if len(self.ready) > self.capacity:  # full=drop_oldest (block reserves places)
            oldest = self.ready.popleft()
            self._discard(oldest, "dropped", len(self.steps))
            self.queue_dropped += oldest.G
        self.queue_peak = max(self.queue_peak, len(self.ready))

    def _take(self, t: int):
        taken = yield from super()._take(t)
        self._wake_launcher()  # queue places freed (full=block)
        return taken

    def _new_version(self) -> None:
        """A weight version arrived: the per-version budget restarts from the groups
        generating or queued (verl's reset at each parameter update)."""
        self.started = self.generating + len(self.ready)
        self._wake_launcher()
