"""The SimPy worker with speculative decoding: a :class:`sim.engine.slot_worker.Worker`
whose synchronous (exclusive) shares are timed by :func:`sim.engine.speculative_lane.speculative_lane`.

Only exclusive batches (the synchronous pipelines) are modelled: the tail switch and the
acceptance draws are defined over one step's share (:mod:`sim.engine.speculative_lane`), so a
streaming request (asynchronous pipelines, held dispatch) raises RuntimeError; the CLI
refuses those combinations before running (one line, exit 2).
"""

from __future__ import annotations

import numpy as np
from rolloutlab.sim.engine.slot_worker import Worker
from rolloutlab.sim.engine.speculative_lane import speculative_lane
from rolloutlab.sim.engine.worker import Segment

__all__ = ["SpeculativeWorker", "key_codes"]


class SpeculativeWorker(Worker):
    """A slot worker that speculates (``config.speculative``, :class:`sim.engine.speculative.SpeculativeDecoding`)."""

    def _begin_segment(self) -> Segment:
        raise RuntimeError(
            "speculative decoding is modelled for synchronous (exclusive) batches only"
        )

    def _run_exclusive(self):
        """Time the whole FIFO share with :func:`speculative_lane` (learner step: the first
        batch's ``step``); yield once at the end."""
        speculative = self.config.speculative
        assert speculative is not None
        chunks = [(b, idx_list[pos:]) for b, _, idx_list, pos in self.waiting]
        self.waiting.clear()
        self.n_waiting = 0
        L = np.concatenate([b.response_tokens[i] for b, i in chunks])
        P = np.concatenate([b.prompt_tokens[i] for b, i in chunks])
        keys = [(id(b), b.keys_[j]) for b, i in chunks for j in i]
        lane = speculative_lane(
            L, P, key_codes(keys), self.cost,
            self.config.max_num_seqs, self.config.prefix_caching, speculative,
            step=chunks[0][0].step, worker=self.index,
        )  # fmt: skip
        now, pos, finished = self.env.now, 0, []
        for b, i in chunks:
            sl = slice(pos, pos + len(i))
            b.first_[i] = now + lane.t_first[sl]
            b.finish_[i] = now + lane.t_finish[sl]
            b.spec_steps[i] = lane.spec_steps[sl]
            b.spec_drawn[i] = lane.drawn[sl]
            finished.extend([b] * len(i))
            pos += len(i)
        yield from self._hold_until(now + float(lane.t_finish.max()), finished)


def key_codes(keys: list) -> np.ndarray:
    """(n,) int64 code of each hashable key in ``keys`` (equal keys, equal codes; first
    seen, smallest code): the prompt keys the speculative lanes take."""
    seen: dict = {}
    return np.array([seen.setdefault(k, len(seen)) for k in keys], dtype=np.int64)
