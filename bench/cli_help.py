"""``rolloutlab --help`` latency: the lazy group (lists commands from ``rolloutlab.cli.HELP``,
imports no command module) against the same help built by importing every command (what
the group did before), each in fresh interpreters started from this one process.

Prints best-of-N wall seconds of each and their ratio. Usage: ``python bench/cli_help.py [N]``.
"""

from __future__ import annotations

import subprocess
import sys
import time

LAZY = "from rolloutlab.cli import main; main(['--help'], standalone_mode=False)"
EAGER = (
    "import click; from rolloutlab.cli import COMMANDS, main; ctx = click.Context(main); "
    "[main.get_command(ctx, n).get_short_help_str() for n in COMMANDS]; "
    "main(['--help'], standalone_mode=False)"
)


def best_of(code: str, n: int) -> float:
    """Best wall time (s) of ``n`` fresh ``python -c code`` runs (output discarded)."""
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        best = min(best, time.perf_counter() - t0)
    return best


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    lazy, eager = best_of(LAZY, n), best_of(EAGER, n)
    print(f"help_lazy_s={lazy:.3f}")
    print(f"help_importing_all_commands_s={eager:.3f}")
    print(f"importing_all_over_lazy={eager / lazy:.1f}")
