"""CPU numerics of a real run: what makes two machines of the same kind give the same numbers.

A real run is deterministic on one machine (fixed seeds everywhere, one torch thread:
:attr:`real.rundir.config.SyncConfig.torch_threads`), but float32 results depend on the code
path the CPU selects: PyTorch's own kernels dispatch on the CPU's vector ISA (AVX2 /
AVX-512, ``torch.backends.cpu.get_cpu_capability()``) and MKL's GEMM picks a kernel per
CPU model. A last-bit difference flips a sampled token now and then, and from there two
runs diverge (docs/real_task.md, "Reproducibility").

``--portable-numerics`` pins both paths before torch is loaded:

- ``ATEN_CPU_CAPABILITY=default``: PyTorch's kernels use no AVX2 / AVX-512 code path;
- ``MKL_CBWR=COMPATIBLE``: MKL's conditional numerical reproducibility mode, the same
  results on every x86-64 CPU (Intel oneMKL developer guide, "Obtaining Numerically
  Reproducible Results").

Same torch (the ``real`` extra pins it), same thread count, same seeds: then the numbers
match across x86-64 machines, at some cost in speed (measured in docs/real_task.md).
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
"""Environment that pins the CPU code paths (module docstring)."""


class NumericsError(RuntimeError):
    """Portable numerics were asked for after torch was loaded with other settings."""


def use_portable_numerics() -> None:
    """Set :data:`PORTABLE_ENV` for this process (call before torch is imported).

    Raises: NumericsError if torch is already imported and the environment differs (the
    settings are read when torch and MKL load; set them in the shell instead).
    """
    differs = [k for k, v in PORTABLE_ENV.items() if os.environ.get(k) != v]
    if differs and "torch" in sys.modules:
        raise NumericsError(
            "--portable-numerics: torch is already loaded; set "
            + " ".join(f"{k}={v}" for k, v in PORTABLE_ENV.items())
            + " in the environment before starting Python"
        )
    os.environ.update(PORTABLE_ENV)


def describe() -> dict[str, Any]:
    """What decided this process's numerics: torch version and CPU capability, thread
    count, the pinning variables, the CPU model and machine (written to ``<run>/numerics.json``)."""
    import torch

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        **{k: os.environ.get(k) for k in PORTABLE_ENV},
        "portable": all(os.environ.get(k) == v for k, v in PORTABLE_ENV.items()),
        "cpu": cpu,
        "machine": platform.machine(),
    }
