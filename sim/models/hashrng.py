"""Counter-based random numbers: draws that are pure functions of integer counters.

A length draw keyed on ``(seed, stream, prompt, step, sample)`` is the same whichever
order, block size or group size it is drawn in, so the SimPy pipeline (one step at a
time), the fast path (thousands of steps per call) and the asynchronous pipeline see the
same lengths (common random numbers), and sample ``j`` of a prompt does not depend on G.
The mixer is the splitmix64 finaliser (Steele, Lea & Flood 2014, "Fast splittable
pseudorandom number generators", OOPSLA), applied once per counter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from rolloutlab.sim.models.special import ndtri

_M1, _M2, _GOLD = (
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
    np.uint64(0x9E3779B97F4A7C15),
)


_MASK = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _mix_int(x: int) -> int:
    """:func:`_mix` on one Python int in ``[0, 2^64)`` (why: numpy scalars cost ~1 us per
    operation, and a step's draw starts with several scalar keys)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def hash_uniform(seed: int, stream: int, *counters) -> np.ndarray:
    """Uniforms in (0, 1) with 53 random bits, a pure function of ``(seed, stream,
    counters...)``; ``counters`` are int arrays (or ints) that broadcast together, and the
    result has their broadcast shape (float64). Each counter is folded in by
    ``h = mix(h ^ (c * golden))``; leading scalar counters are folded in Python ints."""
    h = _mix_int(((seed & _MASK) * 0x9E3779B97F4A7C15 + stream) & _MASK)
    rest = list(counters)
    while rest and np.ndim(rest[0]) == 0:
        h = _mix_int(h ^ ((int(rest.pop(0)) & _MASK) * 0x9E3779B97F4A7C15 & _MASK))
    a: Any = np.uint64(h)  # a uint64 scalar, then arrays
    for c in rest:  # broadcasting as it goes (why: small counters mix on small arrays);
        # array arithmetic wraps modulo 2^64 silently, as splitmix64 wants
        a = _mix(a ^ (np.asarray(c, dtype=np.int64).view(np.uint64) * _GOLD))
    u = (a >> np.uint64(11)).astype(np.float64)  # top 53 bits; in place from here (why: big draws)
    u += 0.5
    u *= 2.0**-53
    return u


def hash_normal(seed: int, stream: int, *counters) -> np.ndarray:
    """Standard normals ``Phi^-1(hash_uniform(...))``; same arguments and shape."""
    u = hash_uniform(seed, stream, *counters)
    return ndtri(u, out=u) if u.ndim else ndtri(u)
