"""The KV block pool of one paged worker with its prefix cache, shared by
:class:`sim.engine.paged_worker.PagedWorker` and the per-iteration reference loop :mod:`tests.reference.kv_loop`.

Modelled on vLLM v1's block pool (``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``):
free blocks sit in one queue in eviction order; a sequence that stops (finishes, is
preempted or aborted) appends its blocks at the tail, its last block first (vLLM frees
``reversed(blocks)``), and full blocks keep their content hash until the allocation that
reuses them reaches them at the head. So a block stays hittable until every block freed
before it has been reused, and an entry is evicted from its last block backwards: what
survives of it is always a prefix of its blocks. A freed block that holds no hash (a
sequence's partial last block) goes to the head instead, to be reused first (vLLM 0.32
``BlockPool.free_blocks``: LIFO reuse of blocks that can never be hit). Free blocks =
``cap - used``, cached ones included.

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

    def _head(self, n_blocks: int) -> None:
        """``n_blocks`` freed blocks without a hash go to the head (reused first)."""
        q = self.queue
        if n_blocks and self._finite:
            if q and q[0][0] is None:
                q[0][1] += n_blocks
            else:
                q.appendleft([None, n_blocks, 0])

    def _entry(self, key, n_blocks: int, whole: int | None = None) -> None:
        """``n_blocks`` freed blocks go to the tail as hittable entry ``key`` (of ``whole``
        blocks when only its first ``n_blocks`` were computed; default all)."""
        c = [key, n_blocks, n_blocks if whole is None else whole]
        self.cached[key] = c
        if self._finite:
            self.queue.append(c)

    def give_back(
        self, n_blocks: int, own_key=None, own_cached: int = 0, unhashed: int = 0
    ) -> None:
        """A sequence stops and frees its ``n_blocks`` own blocks: ``unhashed`` of them
        (its partial last block, :func:`partial_own`) go to the head; with ``own_key``
        the first ``own_cached`` (computed full blocks) stay cached as that entry; the
        rest go to the tail."""
        self.used -= n_blocks
        self._head(unhashed)
        self._plain(n_blocks - own_cached - unhashed)
        if own_cached > 0:
            self._entry(own_key, own_cached)

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

    def grow(self, key, n_blocks: int) -> None:
        """The one sequence computing prompt ``key`` reaches ``n_blocks`` more of its
        blocks (a prefill chunk: vLLM allocates a chunk's blocks when it is scheduled)."""
        k, b = self.refs[key]
        self.refs[key] = (k, b + n_blocks)
        self.alloc(n_blocks)

    def release_computed(self, key, computed: int, whole: int) -> None:
        """The one sequence computing prompt ``key`` (``whole`` blocks) stops; of the
        blocks it holds, the first ``computed`` (full, computed) stay cached as a partial
        entry, the others are freed (vLLM keeps every computed full block hashed)."""
        _, b = self.refs.pop(key)
        self.used -= b
        kept = min(computed, b)
        self._head(b - kept)  # (a partial block: no hash)
        if kept:
            self._entry(key, kept, whole)

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


def prefill_of(
    cache: PrefixCache, key, own_key, P: int, g: int, sh: int, B: int, partial: bool = False
):
    """Prefill of a sequence about to be admitted with prefix caching on (prompt ``P``
    tokens of which ``sh`` full blocks are shared under ``key``, ``g`` generated, block
    size ``B``), read without changing the cache. Returns ``(prefill tokens, prompt hit
    in full)``.

    A prompt hit in full (cached whole, or referenced by a running sequence) saves its
    ``sh`` full blocks; with ``partial`` its partial last prompt block is recomputed, as
    vLLM v1 does (``KVCacheManager.get_computed_blocks`` hits full blocks only), else it
    is free too (the convention of the unpaged engine and the fast path, which know no
    blocks; :attr:`sim.engine.config.EngineConfig.recompute_partial_block`). A
    re-admitted preempted sequence then also reuses what survives of its own computed
    blocks (entry ``own_key``) and recomputes only the tokens after them (at least one:
    vLLM caps a hit at ``num_tokens - 1``, and the entry only holds blocks computed
    before the preemption). A partly evicted prompt hits its surviving blocks; its own
    blocks are then unreachable (vLLM's hash chain). Not followed: a prompt of a
    multiple of ``B`` tokens, whose last full block vLLM recomputes (the cap) into a
    block of the sequence's own; here it is hit."""
    if key not in cache.refs:
        c = cache.cached.get(key)
        if c is None or c[1] < c[2]:  # (not cached in full)
            return P + g - (0 if c is None else c[1]) * B, False
    c = cache.cached.get(own_key) if g else None
    if c is None and not partial:
        return g, True
    return P + g - (sh + (0 if c is None else c[1])) * B, True


def admit(
    cache: PrefixCache,
    key,
    own_key,
    P: int,
    g: int,
    sh: int,
    own: int,
    B: int,
    partial: bool = False,
    shared: int | None = None,
    known: tuple[int, bool] | None = None,
):
    """Admit a sequence with prefix caching on: reference ``shared`` (default ``sh``) of
    its prompt's ``sh`` shared blocks, reuse what :func:`prefill_of` hits and allocate
    the rest of its ``own`` own blocks now (the caller checked they are free; a chunked
    prefill holds only its first chunk's, :func:`chunk_blocks`). Returns
    :func:`prefill_of`'s ``(prefill tokens, prompt hit in full)`` (``known``: the
    caller's, read just before)."""
    out = prefill_of(cache, key, own_key, P, g, sh, B, partial) if known is None else known
    cache.acquire(key, sh if shared is None else shared)
    if out[1] and g and own_key in cache.cached:
        cache.take(own_key, own)
    else:
        cache.alloc(own)
    return out


def chunk_blocks(P: int, g: int, rem: int, sh: int, B: int, hit: bool) -> tuple[int, int]:
    """``(shared, own)`` blocks a sequence (prompt ``P``, ``g`` generated, ``sh`` shared
    prompt blocks) holds once its prefill has ``rem`` tokens left: those covering its
    ``P + g - rem`` computed tokens (vLLM ``KVCacheManager.allocate_slots`` allocates a
    chunk's blocks when it is scheduled), all ``sh`` when its prompt was ``hit`` in full."""
    tot = -(-(P + g - rem) // B)
    s = sh if hit else min(sh, tot)
    return s, tot - s


def partial_own(P: int, g: int, rem: int, sh: int, B: int) -> int:
    """1 if a sequence (as :func:`own_computed`) that stops now holds a partial last
    block of its own (computed tokens not a multiple of ``B``, beyond its ``sh`` shared
    prompt blocks): vLLM hashes full blocks only, so that one is reused first."""
    c = P + g - max(rem, 1)
    return int(c % B != 0 and c > sh * B)


def own_computed(P: int, g: int, rem: int, sh: int, B: int) -> int:
    """Full blocks beyond the ``sh`` shared prompt blocks whose KV a sequence (prompt
    ``P``, ``g`` generated, ``rem`` prefill tokens left) has computed: its KV covers
    ``P + g - max(rem, 1)`` tokens (a producing sequence has not yet fed its last
    token)."""
    return max(0, (P + g - max(rem, 1)) // B - sh)
