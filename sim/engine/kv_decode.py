"""The decoding sequences of one paged worker (:class:`sim.engine.paged_worker.PagedWorker`), kept
incrementally so that an iteration boundary costs O(sequences that change), not
O(running sequences).

A sequence that produces a token in every iteration from iteration count ``k`` on, with
``g`` tokens generated then, has ``g + K - k`` generated at iteration count ``K``, so
the sum of its context tokens ``P + g`` over the set is ``ctx0 + n K`` with ``ctx0``
fixed while the set is. Its KV blocks (rule 1 of :mod:`tests.reference.kv_loop`): it owns
``ceil((P + g) / B) - shared`` and needs one more exactly when ``P + g - 1`` is a multiple
of ``B``, i.e. every ``B`` iterations, at the boundaries whose ``K`` is its *phase*
``(k + 1 - P - g) mod B``. So the sequences needing a block now are those of phase
``K mod B``, and over the next ``j`` boundaries the set needs
``sum ceil((x + j) / B) - ceil(x / B) = n (j // B) + #(phases within the first j mod B)``
blocks. Finishes (at ``k + L - g``) come from a heap whose entries of sequences removed
since are skipped (lazy deletion).

Requests are any objects with slots ``P, L, sh, g, alloc, adm, k, ph`` (prompt, target,
shared prompt blocks, generated, owned blocks, admission number, start count, phase);
``k = -1`` marks one not in the set.
"""

from __future__ import annotations

import heapq


class DecodeSet:
    """Sequences producing a token in every iteration, at iteration count :attr:`K`."""

    def __init__(self, block_size: int):
        self.B = block_size
        self.K = 0  # decode iterations run so far
        self.n = 0  # sequences in the set
        self.ctx0 = 0  # sum of P + g - k over them
        self.finish_at: list = []  # heap (K at finish, adm, request)
        self.by_phase: list[set] = [set() for _ in range(block_size)]
        self.n_phase = [0] * block_size  # len(by_phase[p])

    def context(self) -> int:
        """Sum of ``P + g`` over the set now (tokens; exact, an int)."""
        return self.ctx0 + self.n * self.K

    def add(self, r) -> None:
        """``r`` produces from now on (its ``g`` and ``alloc`` are current)."""
        K = self.K
        r.k, r.ph = K, (K + 1 - r.P - r.g) % self.B
        self.by_phase[r.ph].add(r)
        self.n_phase[r.ph] += 1
        self.n += 1
        self.ctx0 += r.P + r.g - K
        heapq.heappush(self.finish_at, (K + r.L - r.g, r.adm, r))

    def remove(self, r) -> None:
        """Take ``r`` out, at a boundary before it is given this boundary's block:
        ``r.g`` and ``r.alloc`` become its current values (``alloc``: the blocks of its
        last iteration, ``ceil((P + g - 1) / B) - shared``)."""
        self.by_phase[r.ph].discard(r)
        self.n_phase[r.ph] -= 1
        self.n -= 1
        self.ctx0 -= r.P + r.g - r.k
        if self.K > r.k:
            r.g += self.K - r.k
            r.alloc = -(-(r.P + r.g - 1) // self.B) - r.sh
        r.k = -1

    def needing(self) -> set:
        """The sequences that need one more block at this boundary: ask before adding
        this boundary's newcomers (they hold their blocks already); do not keep the set."""
        return self.by_phase[self.K % self.B]

    def extra(self, j: int) -> int:
        """Blocks the set needs at the next ``j`` boundaries (module docstring)."""
        full, part = divmod(j, self.B)
        if not part:
            return self.n * full
        B, ph = self.B, self.n_phase
        s = (self.K + 1) % B  # (phases K+1 .. K+part, wrapping around)
        e = s + part
        rest = sum(ph[s:e]) if e <= B else sum(ph[s:]) + sum(ph[: e - B])
        return self.n * full + rest

    def first_failure(self, free: int, m: int) -> int:
        """Smallest ``j`` in ``[1, m)`` with :meth:`extra` ``(j) > free`` (block allocation
        fails at that boundary), else ``m``. Solved directly (the set is not empty): with
        ``free = full n + rest``, ``j = full B + s``, ``s`` the first offset whose phases
        so far outnumber ``rest`` (``B`` if none)."""
        if m <= 1:
            return m
        full, rest = divmod(free, self.n)
        K, B, ph, seen, s = self.K, self.B, self.n_phase, 0, 1
        while s < B:
            seen += ph[(K + s) % B]
            if seen > rest:
                break
            s += 1
        j = full * B + s
        return j if j < m else m

    def next_finish(self) -> int:
        """Iteration count at which the first sequence of the (non-empty) set finishes."""
        h = self.finish_at
        while h[0][2].k < 0 or h[0][2].adm != h[0][1]:  # removed since it was pushed
            heapq.heappop(h)
        return h[0][0]

    def advance(self, m: int) -> list:
        """Run ``m`` iterations; returns the sequences finishing (still in the set), those
        in it before the last boundary first, each group in admission order (the order
        of the producing list in :mod:`tests.reference.kv_loop`)."""
        k0, h, finishing = self.K, self.finish_at, []
        self.K += m
        while h and h[0][0] <= self.K:
            _, adm, r = heapq.heappop(h)
            if r.k >= 0 and r.adm == adm:
                finishing.append(r)
        finishing.sort(key=lambda r: (r.k == k0, r.adm))
        return finishing
