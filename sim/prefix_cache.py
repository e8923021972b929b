"""The evictable prefix cache of a paged KV cache, shared by :class:`sim.kv.PagedWorker`
and the per-iteration reference loop :mod:`sim.kv_reference` (as vLLM's free block
queue: blocks of a finished group's prompt stay cached until their space is needed)."""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """KV blocks of one worker: blocks referenced by running sequences (:attr:`used`)
    and prompt blocks no running sequence references, kept for prefix hits and evicted
    least-recently-released first when blocks are needed (vLLM's evictable cache).
    Invariant: ``used + cached_blocks <= cap``."""

    def __init__(self, cap: float):
        self.cap = cap
        self.used = 0  # blocks referenced by running sequences
        self.cached_blocks = 0  # blocks of unreferenced, still cached prompts
        self.refs: dict = {}  # prompt key -> (running sequences referencing it, blocks)
        self.lru: OrderedDict = OrderedDict()  # prompt key -> blocks, oldest first

    def free(self) -> float:
        """Blocks available to allocate (evicting unreferenced prompts if needed)."""
        return self.cap - self.used

    def hit(self, key) -> bool:
        """The prompt's blocks are in the cache (referenced or not)."""
        return key in self.refs or key in self.lru

    def give_back(self, n_blocks: int) -> None:
        """Free ``n_blocks`` a sequence owned."""
        self.used -= n_blocks

    def alloc(self, n_blocks: int) -> None:
        """Take ``n_blocks`` (caller checked :meth:`free`), evicting old prompts."""
        self.used += n_blocks
        while self.used + self.cached_blocks > self.cap and self.lru:
            self.cached_blocks -= self.lru.popitem(last=False)[1]

    def acquire(self, key, n_blocks: int) -> None:
        """A sequence starts referencing prompt ``key`` (``n_blocks`` shared blocks)."""
        if key in self.refs:
            k, b = self.refs[key]
            self.refs[key] = (k + 1, b)
            return
        if key in self.lru:
            self.cached_blocks -= self.lru.pop(key)
            self.used += n_blocks
        else:
            self.alloc(n_blocks)
        self.refs[key] = (1, n_blocks)

    def release(self, key, keep: bool) -> None:
        """A sequence stops referencing ``key``; the last one leaves its blocks cached
        (``keep``) or frees them."""
        k, b = self.refs.pop(key)
        if k > 1:
            self.refs[key] = (k - 1, b)
            return
        self.used -= b
        if keep:
            self.lru[key] = b
            self.cached_blocks += b
