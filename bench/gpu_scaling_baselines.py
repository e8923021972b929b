"""The naive rules on every published step-time curve across GPU counts
(``calibration/data/gpu_scaling.csv``): constant step time and step time proportional to
tokens per trainer GPU, each calibrated on every point in turn. The simulator's errors on
the same curves: ``bench/verl_async_validation.py --calibrations all`` and
``bench/areal_scaling_validation.py`` (docs/pipelines.md, "Step time across GPU counts").

Usage: python bench/gpu_scaling_baselines.py [--data CSV] [--out runs/gpu_scaling]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rolloutlab.calibration.validation.gpu_scaling import ScalingDataError, load, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None, help="table (default: the bundled one)")
    ap.add_argument("--out", default="runs/gpu_scaling", help="folder of table.md")
    args = ap.parse_args()
    try:
        curves = load(args.data)
    except ScalingDataError as e:
        raise SystemExit(str(e)) from None
    out = Path(args.out) / "table.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(table(curves)) + "\n")
    print(out.read_text(), end="")


if __name__ == "__main__":
    main()
