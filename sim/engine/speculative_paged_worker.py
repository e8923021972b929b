"""The paged SimPy worker with speculative decoding: a :class:`sim.engine.paged_worker.PagedWorker`
whose synchronous (exclusive) shares are run by :func:`sim.engine.speculative_paged_lane.speculative_paged_lane`
(KV blocks for the tokens a verify step writes, preemption under speculation).

As :class:`sim.engine.speculative_worker.SpeculativeWorker`: exclusive batches only (a streaming request
raises RuntimeError; the CLI refuses asynchronous pipelines and held dispatch with
``--speculative`` before running), and no token budget (``max_num_batched_tokens``), which
:class:`sim.engine.config.EngineConfig` refuses with ``speculative``.
"""

from __future__ import annotations

from rolloutlab.sim.engine.paged_worker import PagedWorker
from rolloutlab.sim.engine.speculative_paged_lane import speculative_paged_lane
from rolloutlab.sim.engine.speculative_worker import key_codes
from rolloutlab.sim.engine.worker import Segment

__all__ = ["SpeculativePagedWorker"]


class SpeculativePagedWorker(PagedWorker):
    """A paged worker that speculates (``config.speculative``, ``config.kv_blocks`` set)."""

    def _begin_segment(self) -> Segment | None:
        raise RuntimeError(
            "speculative decoding is modelled for synchronous (exclusive) batches only"
        )

    def _run_exclusive(self):
        """Run the whole FIFO queue with :func:`speculative_paged_lane` (learner step: the first
        request's batch ``step``); yield once at the end."""
        speculative, cfg = self.config.speculative, self.config
        assert speculative is not None and cfg.kv_blocks is not None
        reqs = list(self.waiting)
        self.waiting.clear()
        self.left.clear()
        lane = speculative_paged_lane(
            [r.L for r in reqs], [r.P for r in reqs], key_codes([r.key for r in reqs]),
            self.cost, cfg.max_num_seqs, cfg.kv_blocks, cfg.block_size, cfg.prefix_caching,
            speculative, step=reqs[0].batch.step, worker=self.index,
        )  # fmt: skip
        now, finished = self.env.now, []
        for j, r in enumerate(reqs):
            b, i = r.batch, r.i
            b.first_[i] = now + lane.t_first[j]
            b.finish_[i] = now + lane.t_finish[j]
            b.spec_steps[i] = lane.spec_steps[j]
            b.spec_drawn[i] = lane.drawn[j]
            b.preemptions[i] += lane.preemptions[j]
            finished.append(b)
        self.preemptions += int(lane.preemptions.sum())
        self.max_kv_blocks_used = max(self.max_kv_blocks_used, lane.max_blocks)
        yield from self._hold_until(now + float(lane.t_finish.max()), finished)
