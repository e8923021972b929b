"""The incremental set of decoding sequences (sim/engine/kv_decode.py) against the direct sums it
replaces: blocks needed over the next j boundaries, the first failing boundary, who needs
a block now, context tokens and finish order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.sim.engine.kv_decode import DecodeSet


class Seq:
    __slots__ = ("P", "L", "sh", "g", "alloc", "adm", "k", "ph")

    def __init__(self, P: int, L: int, g: int, adm: int):
        self.P, self.L, self.sh, self.g, self.alloc, self.adm = P, L, 0, g, 0, adm
        self.k = self.ph = -1


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@st.composite
def decode_case(draw):
    B = draw(st.integers(1, 20))
    n = draw(st.integers(1, 12))
    seqs = []
    for adm in range(n):
        P, g = draw(st.integers(0, 60)), draw(st.integers(0, 40))
        seqs.append(Seq(P, g + draw(st.integers(1, 80)), g, adm))
    # each joins after some iterations have run, as sequences finish prefilling over time
    joins = sorted(draw(st.lists(st.integers(0, 50), min_size=n, max_size=n)))
    return B, seqs, joins


def build(B, seqs, joins) -> DecodeSet:
    d = DecodeSet(B)
    for s, k in zip(seqs, joins):
        d.K = k
        d.add(s)
    return d


@settings(max_examples=30, deadline=None)
@given(decode_case(), st.integers(0, 70), st.integers(0, 200))
def test_extra_first_failure_and_needing_equal_the_direct_sums(case, j, free):
    B, seqs, joins = case
    d = build(B, seqs, joins)
    K = d.K
    x = [s.P + s.g + K - k for s, k in zip(seqs, joins)]  # context tokens now
    assert d.context() == sum(x)
    direct = lambda j: sum(ceil_div(xi + j, B) - ceil_div(xi, B) for xi in x)
    assert d.extra(j) == direct(j)
    m = j + 1
    first = next((i for i in range(1, m) if direct(i) > free), m)
    assert d.first_failure(free, m) == first
    # needing a block now: P + g - 1 a multiple of B, among those that produced since
    # joining (the worker asks before this boundary's newcomers join)
    now = {s.adm for s, k, xi in zip(seqs, joins, x) if k < K and (xi - 1) % B == 0}
    assert {s.adm for s in d.needing() if s.k < K} == now


@settings(max_examples=30, deadline=None)
@given(decode_case())
def test_finishes_come_in_order_and_removal_gives_current_values(case):
    B, seqs, joins = case
    d = build(B, seqs, joins)
    K0 = d.K
    finish = {s.adm: k + s.L - s.g for s, k in zip(seqs, joins)}
    first = min(finish.values())
    if first <= K0:
        return  # (a sequence would have finished before the last joined)
    gone = seqs[0]
    g_now = gone.g + K0 - joins[0]
    d.remove(gone)
    assert gone.k == -1 and gone.g == g_now
    if K0 > joins[0]:
        assert gone.alloc == ceil_div(gone.P + g_now - 1, B)
    left = {a: f for a, f in finish.items() if a != gone.adm}
    if not left:
        return
    nxt = min(left.values())
    assert d.next_finish() == nxt
    done = d.advance(nxt - K0)
    assert [s.adm for s in done] == sorted(a for a, f in left.items() if f == nxt)
