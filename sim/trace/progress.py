"""Progress of a long run, on stderr: a tqdm bar on a terminal; when stderr is not a
terminal (piped to a file, a CI log), one plain line at each tenth of the work and at the
end, with the elapsed time, so a log shows the run is alive without carriage returns.

One entry point, :func:`progress_bar` (and :func:`phase` for a step without a count), used by every loop that can run for more than a few
seconds (simulations, grids, the warm start, real runs, validations).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator, Sized
from contextlib import contextmanager
from typing import Any, TextIO

from tqdm import tqdm

LINES = 10
"""Plain lines per run when not on a terminal: one each time another 1/LINES is done."""
EVERY = 10
"""Without a known total: one plain line every EVERY units."""


class LineProgress:
    """tqdm's interface (``update``, ``set_postfix``, ``set_postfix_str``, ``close``,
    iteration, ``with``) printing ``desc: done/total unit (pct %), elapsed T s[, postfix]``
    lines to ``stream`` at each 1/:data:`LINES` of ``total`` (every :data:`EVERY` units
    without one) and a last line at :meth:`close` (``done`` or ``stopped at``)."""

    def __init__(
        self,
        iterable: Iterable | None = None,
        total: int | None = None,
        desc: str = "",
        unit: str = "it",
        initial: int = 0,
        stream: TextIO | None = None,
    ):
        if total is None and isinstance(iterable, Sized):
            total = initial + len(iterable)
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n, self.stream, self.postfix = initial, stream or sys.stderr, ""
        self.t0, self.closed, self._shown = time.monotonic(), False, initial
        self._next = self._mark_after(initial)

    def _mark_after(self, n: int) -> int:
        step = max(1, -(-self.total // LINES)) if self.total else EVERY
        return (n // step + 1) * step

    def _line(self, last: bool = False) -> None:
        of = f"/{self.total}" if self.total else ""
        pct = f" ({100 * self.n / self.total:.0f} %)" if self.total else ""
        tail = f", {self.postfix}" if self.postfix else ""
        head = f"{self.desc}: " if self.desc else ""
        finished = self.n >= self.total if self.total else last
        what = "done, " if finished else ("stopped at " if last else "")
        elapsed = time.monotonic() - self.t0
        self._shown = self.n
        print(
            f"{head}{what}{self.n}{of} {self.unit}{pct}, elapsed {elapsed:.1f} s{tail}",
            file=self.stream,
            flush=True,
        )

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units; a line when a mark is passed."""
        self.n += n
        if self.n >= self._next:
            self._line()
            self._next = self._mark_after(self.n)

    def set_postfix(
        self, ordered_dict: dict | None = None, refresh: bool = True, **kw: Any
    ) -> None:
        """What the next line ends with (``k=v`` pairs, as tqdm)."""
        items = {**(ordered_dict or {}), **kw}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        """What the next line ends with (a string, as tqdm)."""
        self.postfix = s

    def close(self) -> None:
        """The last line, once: ``done`` when the total was reached (none when the line
        just printed said so), ``stopped at`` when it was not (always: a run that ends
        short says where, even right after a line)."""
        short = self.total is not None and 0 < self.total and self.n < self.total
        if not self.closed and (self.n != self._shown or short):
            self._line(last=True)
        self.closed = True

    def __iter__(self) -> Iterator:
        for item in self.iterable or ():
            yield item
            self.update()
        self.close()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def progress_bar(
    iterable: Iterable | None = None,
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    initial: int = 0,
    enabled: bool = True,
    leave: bool = False,
) -> Any:
    """A tqdm bar when stderr is a terminal, else a :class:`LineProgress`; nothing shown
    when ``enabled`` is False (a disabled tqdm: the same interface, no output). Wraps
    ``iterable`` when given (``for x in progress_bar(xs, desc=...)``)."""
    if not enabled:
        return tqdm(iterable, total=total, disable=True)
    if sys.stderr.isatty():
        return tqdm(iterable, total=total, desc=desc, unit=unit, initial=initial, leave=leave)
    return LineProgress(iterable, total=total, desc=desc, unit=unit, initial=initial)


@contextmanager
def phase(desc: str, enabled: bool = True, stream: TextIO | None = None) -> Iterator[None]:
    """One line when a long step without a count starts (``desc ...``) and one when it
    ends (``desc: done, elapsed T s``), on stderr (terminal or not); nothing when
    ``enabled`` is False or the step raises (its error says what happened)."""
    out = stream or sys.stderr
    if enabled:
        print(f"{desc} ...", file=out, flush=True)
    t0 = time.monotonic()
    yield
    if enabled:
        print(f"{desc}: done, elapsed {time.monotonic() - t0:.1f} s", file=out, flush=True)
