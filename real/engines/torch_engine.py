"""The torch (CPU) rollout engine, an implementation of
:class:`real.engines.interface.RolloutEngine`.

:class:`TorchEngine` keeps ``capacity`` sequence slots over one :class:`~real.policy.model.KVCache`.
``mode="continuous"``: every iteration a free slot admits the next waiting request
(batched prefill), then every running sequence decodes one token. ``mode="static"``: a
wave of up to ``capacity`` requests is admitted only when no sequence is running, so a
wave waits for its longest member (the padding waste SAGC targets).

A request with a ``tool`` is multi-turn (:mod:`real.engines.tool_turns`): when it samples
:data:`real.tasks.lookup.TOOL_ID` it is parked (slot and KV cache kept) until its tool's
latency has passed on the wall clock, the tool's output is appended (``tool_mask``), and
generation resumes; while only parked sequences remain the engine sleeps.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from rolloutlab.real.engines import tool_turns
from rolloutlab.real.engines.interface import RolloutRequest, RolloutResult, check_fits
from rolloutlab.real.engines.sampling import SamplingParams, behaviour_logprobs, sample
from rolloutlab.real.policy.model import KVCache, LlamaLM
from rolloutlab.real.rundir.config import MODES
from rolloutlab.real.tasks.lookup import TOOL_ID
from rolloutlab.real.tasks.tokenizer import EOS_ID, PAD_ID


@dataclass
class _Running:
    result: RolloutResult
    generator: torch.Generator
    slot: int
    length: int  # tokens in the cache after the next write: prompt + response so far
    tool: Callable[[list[int]], tuple[list[int], float]] | None = None
    ready_at: float | None = None  # parked on a tool call until this clock time (s)
    pending: list[int] = field(default_factory=list)  # the tool's output, appended at resume


class TorchEngine:
    """Continuous or static batching over a per-slot KV cache, on CPU.

    Args:
        model: the generator's own copy of the policy (weights arrive via update_weights).
        capacity: number of slots (concurrent sequences).
        clock: seconds since run start (the trace clock).
        mode: ``"continuous"`` or ``"static"``.
        worker: replica index written to every result.
    Raises: ValueError on an unknown mode or a non-positive capacity.
    """

    def __init__(
        self,
        model: LlamaLM,
        capacity: int,
        clock: Callable[[], float],
        mode: str = "continuous",
        worker: int = 0,
    ):
        if mode not in MODES:
            raise ValueError(f"TorchEngine: mode {mode!r}, expected one of {MODES}")
        if capacity < 1:
            raise ValueError(f"TorchEngine: capacity must be >= 1, got {capacity}")
        self.model = model.eval()
        self.capacity, self.clock, self.mode, self.worker = capacity, clock, mode, worker
        self.policy_version = 0
        self.max_len = model.cfg.max_position_embeddings
        self.cache = KVCache.empty(
            model.cfg, capacity, self.max_len, next(model.parameters()).dtype
        )
        self.decode_iterations = 0
        """Decode iterations run so far (a batch-occupancy statistic)."""

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``state_dict`` into the engine's model (a real copy: the weight sync)."""
        self.model.load_state_dict(state_dict, strict=True)
        self.policy_version = version

    def generate(
        self, requests: Sequence[RolloutRequest], params: SamplingParams
    ) -> list[RolloutResult]:
        """Run all ``requests``; see the class docstring for the scheduling.

        Raises: ValueError naming the request whose prompt plus ``max_response_length``
        does not fit the cache (``max_position_embeddings``).
        """
        check_fits(requests, params.max_response_length, self.max_len, "max_position_embeddings")
        t_submit = self.clock()
        waiting = deque(requests)
        free = list(range(self.capacity))
        running: list[_Running] = []
        done: dict[int, RolloutResult] = {}
        with torch.inference_mode():
            while waiting or running:
                if waiting and free and (self.mode == "continuous" or not running):
                    admitted = []
                    while waiting and free:
                        req = waiting.popleft()
                        res = RolloutResult(
                            req.request_id,
                            len(req.prompt_ids),
                            t_submit_s=t_submit,
                            worker=self.worker,
                            policy_version=self.policy_version,
                        )
                        gen = torch.Generator().manual_seed(req.seed)
                        n_prompt = len(req.prompt_ids)
                        seq = _Running(res, gen, free.pop(0), n_prompt, req.tool)
                        if req.tool is not None:
                            tool_turns.open_turn(res.turns, n_prompt, n_prompt, t_submit)
                        admitted.append((seq, req.prompt_ids))
                    self._prefill(admitted, params)
                    running += [seq for seq, _ in admitted]
                elif active := [s for s in running if s.ready_at is None]:
                    self._decode(active, params)
                else:  # only parked sequences: wait for the first tool to return
                    time.sleep(max(0.0, min(s.ready_at or 0.0 for s in running) - self.clock()))
                now = self.clock()
                for seq in [s for s in running if s.ready_at is not None and s.ready_at <= now]:
                    self._resume(seq, params)
                for seq in [s for s in running if s.result.finish_reason]:
                    running.remove(seq)
                    free.append(seq.slot)
                    free.sort()
                    done[seq.result.request_id] = seq.result
        return [done[r.request_id] for r in requests]

    def _prefill(
        self, admitted: list[tuple[_Running, tuple[int, ...]]], params: SamplingParams
    ) -> None:
        n, p_max = len(admitted), max(len(p) for _, p in admitted)
        ids = torch.full((n, p_max), PAD_ID, dtype=torch.long)  # (N, P) right-padded
        for i, (_, prompt) in enumerate(admitted):
            ids[i, : len(prompt)] = torch.tensor(prompt)
        seqs = [s for s, _ in admitted]
        slots = torch.tensor([s.slot for s in seqs])
        logits = self.model.forward_cached(ids, slots, torch.zeros(n, dtype=torch.long), self.cache)
        last = torch.tensor([len(p) - 1 for _, p in admitted])
        self._sample_into(seqs, logits[torch.arange(n), last], params, first=True)

    def _resume(self, s: _Running, params: SamplingParams) -> None:
        """Append the parked ``s``'s tool output, prefill it with the tool token (the rest
        of its context is in its slot's cache) and sample the next turn's first token."""
        res, out = s.result, s.pending
        t_ready, s.ready_at, s.pending = s.ready_at, None, []
        room = params.max_response_length - len(res.response_ids) - 1
        res.response_ids += out[: max(room, 0)]
        res.logprobs += [0.0] * len(out[: max(room, 0)])
        res.tool_mask += [True] * len(out[: max(room, 0)])
        if room <= len(out):  # no token left for the model: the rollout ends here
            res.finish_reason, res.t_finish_s = "length", self.clock()
            return
        n_new = len(out) + 1  # the tool token (not yet in the cache) and the output
        ids = torch.tensor([res.response_ids[-n_new:]])  # (1, n_new)
        tool_turns.open_turn(
            res.turns, res.prompt_tokens + len(res.response_ids), n_new, float(t_ready or 0.0)
        )
        logits = self.model.forward_cached(
            ids, torch.tensor([s.slot]), torch.tensor([s.length]), self.cache
        )
        s.length += n_new
        self._sample_into([s], logits[:, -1], params, first=False)

    def _decode(self, running: list[_Running], params: SamplingParams) -> None:
        ids = torch.tensor([[s.result.response_ids[-1]] for s in running])  # (N, 1)
        slots = torch.tensor([s.slot for s in running])
        start = torch.tensor([s.length for s in running])
        logits = self.model.forward_cached(ids, slots, start, self.cache)[:, 0]  # (N, V)
        for s in running:
            s.length += 1
        self.decode_iterations += 1
        self._sample_into(running, logits, params, first=False)

    def _sample_into(
        self, seqs: list[_Running], logits: torch.Tensor, params: SamplingParams, first: bool
    ) -> None:
        uniforms = torch.cat([torch.rand(1, generator=s.generator) for s in seqs])  # (N,)
        tokens = sample(logits, uniforms, params)
        logps = behaviour_logprobs(logits, tokens, params.temperature)
        now = self.clock()
        for s, tok, lp in zip(seqs, tokens.tolist(), logps.tolist()):
            res = s.result
            res.response_ids.append(tok)
            res.logprobs.append(lp)
            if first:
                res.t_first_token_s = now
            if s.tool is not None:
                res.tool_mask.append(False)
                tool_turns.on_token(res.turns, now)
            if tok == EOS_ID or len(res.response_ids) >= params.max_response_length:
                res.finish_reason = "stop" if tok == EOS_ID else "length"
                res.t_finish_s = now
                if s.tool is not None:
                    tool_turns.close_turn(res.turns, now, res.finish_reason)
            elif s.tool is not None and tok == TOOL_ID:
                s.pending, latency = s.tool(res.response_ids)
                s.ready_at = now + latency
                tool_turns.close_turn(res.turns, now, "tool_call", s.ready_at)
