"""The KV block pool of one paged worker with its prefix cache, shared by
:class:`sim.engine.paged_worker.PagedWorker` and the per-iteration reference loop :mod:`tests.reference.kv_loop`.

Modelled on vLLM v1's block pool (``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``):
free blocks sit in one queue in eviction order; a sequence that stops (finishes, is
preempted or aborted) appends its blocks at the tail, its last block first (vLLM frees
``reversed(blocks)``), and full blocks keep their content hash until the allocation that
reuses them reaches them at the head. So a block stays hittable until every block freed
before it has been reused, and an entry is evicted from its last block backwards: what
survives of it is always a prefix of its blocks. Free blocks = ``cap - used``, cached
ones included.

Two kinds of entries can be hit: a group's shared prompt blocks (key: the prompt key),
and the computed full blocks of a preempted sequence beyond its prompt (key:
``("own", sequence key)``: its generated tokens make them unique to it), which it hits
when re-admitted. Other freed blocks (a finished sequence's own blocks, a partial block)
can never be hit here and go to the queue as plain free blocks.
"""

from __future__ import annotations

from collections import deque


class PrefixCache:
    """Blocks of one worker: :attr:`used` (referenced by running sequences) and the free
    queue (eviction order, hittable entries inside). Invariant: ``used <= cap`` and the
    queue holds ``cap - used`` blocks (an unlimited ``cap`` keeps no queue: nothing is
    ever evicted)."""

    def __init__(self, cap: float):
        self.cap = cap
        self.used = 0  # blocks referenced by running sequences
        self.refs: dict = {}  # prompt key -> (running sequences referencing it, blocks)
        self.cached: dict = {}  # entry key -> its chunk [key, blocks still cached, whole]
        # (why chunks: one append per freed sequence, so an allocation costs O(chunks
        # it consumes), not O(blocks))
        self.queue: deque[list] = deque()  # chunks [key or None, blocks, whole], head first
        self._finite = cap != float("inf")
        if self._finite:
            self.queue.append([None, int(cap), 0])

    @property
    def cached_blocks(self) -> int:
        """Blocks of hittable entries still in the free queue."""
        return sum(c[1] for c in self.cached.values())

    def free(self) -> float:
        """Blocks available to allocate (cached ones are evicted as needed)."""
        return self.cap - self.used

    def hit_blocks(self, key) -> int:
        """Blocks of entry ``key`` still cached (its surviving prefix); -1 if none."""
        c = self.cached.get(key)
        return -1 if c is None else c[1]

    def hit(self, key) -> bool:
        """Prompt ``key`` is cached in full or referenced by a running sequence."""
        if key in self.refs:
            return True
        c = self.cached.get(key)
        return c is not None and c[1] == c[2]

    def alloc(self, n_blocks: int) -> None:
        """Take ``n_blocks`` (caller checked :meth:`free`) from the head of the queue,
        evicting the entries they belonged to (same result as one block at a time)."""
        self.used += n_blocks
        q, n = self.queue, n_blocks
        if not q or n <= 0:
            return  # (an unlimited pool keeps no queue)
        c = q[0]
        while c[1] <= n:  # (the head chunk is used up: evict it whole)
            n -= c[1]
            c[1] = 0
            q.popleft()
            if c[0] is not None and self.cached.get(c[0]) is c:
                del self.cached[c[0]]
            if n == 0:
                return
            c = q[0]
        c[1] -= n

    def _plain(self, n_blocks: int) -> None:
        """``n_blocks`` freed blocks nobody can hit go to the tail."""
        q = self.queue
        if n_blocks and self._finite:
            if q and q[-1][0] is None:  # (plain blocks after plain blocks: one chunk)
                q[-1][1] += n_blocks
            else:
                q.append([None, n_blocks, 0])

    def _entry(self, key, n_blocks: int) -> None:
        """``n_blocks`` freed blocks go to the tail as hittable entry ``key``."""
        c = [key, n_blocks, n_blocks]
        self.cached[key] = c
        if self._finite:
            self.queue.append(c)

    def give_back(self, n_blocks: int, own_key=None, own_cached: int = 0) -> None:
        """A sequence stops and frees its ``n_blocks`` own blocks; with ``own_key`` the
        first ``own_cached`` of them (computed full blocks) stay cached as that entry
        (its partial last block is freed first)."""
        self.used -= n_blocks
        if own_cached > 0:
            self._plain(n_blocks - own_cached)
            self._entry(own_key, own_cached)
        else:
            self._plain(n_blocks)

    def take(self, key, n_blocks: int) -> int:
        """A re-admitted sequence reuses what survives of entry ``key`` and allocates the
        rest of its ``n_blocks``; returns the blocks hit."""
        c = self.cached.pop(key, None)
        if c is None:
            self.alloc(n_blocks)
            return 0
        hit, c[1] = c[1], 0  # (out of the queue; popped when it reaches the head)
        self.used += hit
        if n_blocks > hit:
            self.alloc(n_blocks - hit)
        return hit

    def acquire(self, key, n_blocks: int) -> int:
        """A sequence starts referencing prompt ``key`` (``n_blocks`` shared blocks):
        reuses its cached prefix and allocates the rest. Returns the blocks hit
        (``n_blocks`` when a running sequence references it)."""
        if key in self.refs:
            k, b = self.refs[key]
            self.refs[key] = (k + 1, b)
            return b
        self.refs[key] = (1, n_blocks)
        return self.take(key, n_blocks)

    def release(self, key, keep: bool) -> None:
        """A sequence stops referencing ``key``; the last one leaves its blocks cached
        (``keep``) or frees them."""
        k, b = self.refs.pop(key)
        if k > 1:
            self.refs[key] = (k - 1, b)
            return
        self.used -= b
        if keep:
            self._entry(key, b)
        else:
            self._plain(b)


def admit(cache: PrefixCache, key, own_key, P: int, g: int, sh: int, own: int, B: int):
    """Blocks and prefill of a sequence admitted with prefix caching on (prompt ``P``
    tokens of which ``sh`` full blocks are shared under ``key``, ``g`` generated,
    ``own`` own blocks, block size ``B``; the caller checked the blocks are free).
    Returns ``(prefill tokens, prompt hit in full)``.

    A prompt hit in full (cached whole, or referenced by a running sequence) costs no
    prompt prefill (the model's convention: the partial last prompt block is not
    recomputed); a re-admitted preempted sequence then also reuses what survives of its
    own computed blocks (entry ``own_key``) and recomputes only the tokens after them
    (at least one: vLLM v1 caps a hit at ``num_tokens - 1``, and the entry only holds
    blocks computed before the preemption). A partly evicted prompt hits its surviving
    blocks; its own blocks are then unreachable (vLLM's hash chain)."""
    refs = cache.refs
    if key in refs:
        k, b = refs[key]
        refs[key] = (k + 1, b)
    else:
        c = cache.cached.get(key)
        if c is None or c[1] < c[2]:  # (not cached in full)
            a = cache.acquire(key, sh)
            cache.alloc(own)
            return P + g - a * B, False
        cache.acquire(key, sh)
    if not g or own_key not in cache.cached:  # (nothing of its own cached)
        cache.alloc(own)
        return g, True
    k = cache.take(own_key, own)
    return (g if k == 0 else P + g - (sh + k) * B), True


def own_computed(P: int, g: int, rem: int, sh: int, B: int) -> int:
    """Full blocks beyond the ``sh`` shared prompt blocks whose KV a sequence (prompt
    ``P``, ``g`` generated, ``rem`` prefill tokens left) has computed: its KV covers
    ``P + g - max(rem, 1)`` tokens (a producing sequence has not yet fed its last
    token)."""
    return max(0, (P + g - max(rem, 1)) // B - sh)
