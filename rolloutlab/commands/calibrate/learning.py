"""Click commands ``rolloutlab calibrate pass-rate`` and ``rolloutlab calibrate learning``
(wiring only; the fits are :mod:`calibration.fits.passrate_fit` and
:mod:`calibration.fits.learning_fit`; ``pass-rate`` reads its file with the grouped reader,
:func:`calibration.scenarios.groups.read_pass_rate_samples`).

``--out`` gets one block (``pass_rate`` or ``learning``): a new file holds just that
block; an existing calibration JSON (a scenario) or block file gets the block added or
replaced, everything else kept; any other existing file is refused. Bad input: one line
naming the file and field, exit code 2, nothing written.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from rolloutlab.calibration.fits.learning_fit import fit_learning
from rolloutlab.calibration.fits.learning_noise_fit import fit_noise_law, require_settings
from rolloutlab.calibration.fits.passrate_fit import pass_rate_block
from rolloutlab.calibration.fits.reward_curve_fit import DEFAULT_DISPERSION
from rolloutlab.calibration.fits.verl_learning import verl_blocks
from rolloutlab.calibration.readers.run_curve import read_run
from rolloutlab.calibration.scenarios.groups import read_pass_rate_samples
from rolloutlab.calibration.scenarios.writer import (
    rolloutlab_version,
    sha256_file,
    write_json_atomic,
)
from rolloutlab.commands.options.common import BadInput, out_option
from rolloutlab.commands.options.types import POSITIVE, PROMPTS
from rolloutlab.sim.scenario.scenario import FORMAT, CalibrationError, scenario_from_dict
from rolloutlab.sim.trace.progress import phase

BLOCKS = ("pass_rate", "learning")


def write_output(obj: dict, out: str | Path) -> None:
    """:func:`calibration.scenarios.writer.write_json_atomic`, an unwritable ``out`` as BadInput."""
    try:
        write_json_atomic(obj, out)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def merged_output(out: str | Path, key: str, block: dict) -> dict:
    """The JSON to write to ``out``: ``out``'s content with ``key`` set to ``block``.

    Raises BadInput when ``out`` exists and is not a calibration JSON (format
    ``rolloutlab.calibration``, checked by :func:`sim.scenario.scenario.scenario_from_dict`) or a
    file holding only pass_rate/learning blocks."""
    out = Path(out)
    if not out.exists():
        return {key: block}
    try:
        d = json.loads(out.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{out}: exists and is not JSON ({exc}); refusing to overwrite") from None
    if isinstance(d, dict) and d.get("format") == FORMAT:
        try:
            scenario_from_dict(d, str(out))
        except CalibrationError as exc:
            raise BadInput(f"{exc}; refusing to overwrite") from None
    elif not (isinstance(d, dict) and d and set(d) <= set(BLOCKS)):
        raise BadInput(
            f"{out}: exists and is neither a calibration JSON nor a pass_rate/learning "
            "block file; refusing to overwrite"
        )
    return {**d, key: block}


def _provenance(path: str, command: str) -> dict:
    return {
        "file": path,
        "sha256": sha256_file(path),
        "command": command,
        "rolloutlab_version": rolloutlab_version(),
    }


@click.command("pass-rate")
@click.argument("file", type=click.Path(dir_okay=False))
@out_option("JSON to write.", dest="out", file=True, as_path=False)
@click.option("--score-field", default="score", show_default=True, help="Correctness list.")
@click.option(
    "--responses-field",
    default=None,
    help="Response texts (coupling from their CHARACTER lengths; numbers are taken as "
    "given). Default: code when the file has it, else the common spellings of lengths, "
    "else none (pass rates only; the coupling needs lengths and is left at 0).",
)
@click.option(
    "--lengths-field", default=None, help="Response lengths (wins over --responses-field)."
)
@click.option("--note", default=None, help="Free text added to provenance (e.g. origin).")
def calibrate_pass_rate(file, out, score_field, responses_field, lengths_field, note):
    """Fit the pass-rate distribution (beta-binomial MLE) and the length coupling of a
    grouped per-sample FILE (JSONL, CSV or parquet; one record per prompt or per sample;
    read by :func:`calibration.readers.grouped.read_grouped`); writes the ``pass_rate`` block to
    --out."""
    cmd = f"rolloutlab calibrate pass-rate {shlex.quote(file)} --out {shlex.quote(out)}"
    if score_field != "score":
        cmd += f" --score-field {shlex.quote(score_field)}"
    if note:
        cmd += f" --note {shlex.quote(note)}"
    if lengths_field:
        cmd += f" --lengths-field {shlex.quote(lengths_field)}"
    elif responses_field is not None:
        cmd += f" --responses-field {shlex.quote(responses_field)}"
    try:
        data = read_pass_rate_samples(file, score_field, lengths_field or responses_field)
        prov = _provenance(file, cmd) | ({"note": note} if note else {})
        block = pass_rate_block(data, prov)
    except (ValueError, OSError) as exc:
        raise BadInput(str(exc)) from None
    write_output(merged_output(out, "pass_rate", block), out)
    f = block["fit"]
    click.echo(
        f"wrote {out}: pass_rate {block['spec']} (mean {f['mean_pass_rate']:.3f} "
        f"+- {f['mean_pass_rate_se']:.3f}), "
        + (
            f"coupling {block['coupling']} +- {f['se']['coupling'] or float('nan'):.2g}"
            if "coupling_note" not in f
            else f"coupling {f['coupling_note']}"
        )
        + f", {block['provenance']['n_prompts']} prompts"
    )


@click.command("learning")
@click.option(
    "--real",
    "run_dirs",
    multiple=True,
    type=click.Path(),
    help="Run directory (real sync), or a folder of them; repeat for several runs. The noise "
    "law needs runs at >= 2 (G, B) settings (one setting: --mean-field).",
)
@click.option(
    "--verl-tb",
    "verl_dir",
    default=None,
    type=click.Path(),
    help="verl TensorBoard run folder: fit the per-step critic/score/mean curve instead.",
)
@out_option("JSON to write.", dest="out", file=True, as_path=False)
@click.option(
    "--init-steps",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="--real: steps whose groups start the initial Beta fit.",
)
@click.option(
    "--as-lr-ref",
    type=POSITIVE,
    default=None,
    help="Write this lr_ref instead of the run's lr: the fitted gain per unit signal is "
    "assumed to hold at another model's reference lr (a placeholder transfer; say so).",
)
@click.option(
    "--group-size", default=5, show_default=True, type=click.IntRange(min=2), help="--verl-tb: G."
)
@click.option(
    "--prompts",
    default=1024,
    show_default=True,
    type=PROMPTS,
    help="--verl-tb: prompts per step (B; only the sampling-noise estimate uses it).",
)
@click.option(
    "--dispersion",
    default=DEFAULT_DISPERSION,
    show_default=True,
    type=POSITIVE,
    help="--verl-tb: a + b of the initial Beta, fixed (a mean curve does not identify it).",
)
@click.option(
    "--skip-steps",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="--verl-tb: leave out the first N logged steps (e.g. a format-learning phase).",
)
@click.option(
    "--check",
    "checks",
    multiple=True,
    type=click.Path(),
    help="--verl-tb: another run to predict with the fitted parameters (RMSE in fit.heldout).",
)
@click.option(
    "--learning-model",
    type=click.Choice(["linear", "saturating"]),
    default="linear",
    show_default=True,
    help="--real: shape of the shift (docs/learning.md §2); saturating also fits theta_max.",
)
@click.option(
    "--mean-field",
    is_flag=True,
    help="--real: fit the law without its noise term (b_noise = 0; one setting suffices).",
)
@click.option(
    "--advantage",
    type=click.Choice(["std", "mean"]),
    default="std",
    show_default=True,
    help="--real noise law: the learner's advantage (real sync: std, group-normalised).",
)
@click.option("--note", default=None, help="Free text added to provenance.")
def calibrate_learning(
    run_dirs, verl_dir, out, init_steps, as_lr_ref, learning_model, mean_field, advantage, note,
    **verl_opts,
):  # fmt: skip
    """Fit the learning-progress model to real runs' per-group correctness (--real;
    writes the ``learning`` block: the noise law on runs at >= 2 (G, B) settings, or with
    --mean-field the law without noise) or to a verl run's training-reward curve
    (--verl-tb; writes the ``pass_rate`` and ``learning`` blocks). Exactly one of the two."""
    if bool(run_dirs) == (verl_dir is not None):
        raise BadInput("calibrate learning: give exactly one of --real RUN_DIR, --verl-tb RUN_DIR")
    if verl_dir is not None:
        _from_verl(verl_dir, out, as_lr_ref, note, **verl_opts)
        return
    runs = expand_runs(run_dirs)
    cmd = "rolloutlab calibrate learning" + "".join(f" --real {shlex.quote(d)}" for d in run_dirs)
    cmd += f" --out {shlex.quote(out)}"
    if mean_field:
        cmd += " --mean-field"
    elif advantage != "std":
        cmd += f" --advantage {advantage}"
    if init_steps != 3:
        cmd += f" --init-steps {init_steps}"
    if as_lr_ref is not None:
        cmd += f" --as-lr-ref {as_lr_ref:g}"
    if learning_model != "linear":
        cmd += f" --learning-model {learning_model}"
    if note:
        cmd += f" --note {shlex.quote(note)}"
    try:
        curves = [read_run(d) for d in runs]
        if not mean_field:
            require_settings(curves)
        with phase(f"calibrate learning: fitting {len(runs)} run(s)"):  # minutes on long runs
            if mean_field:
                block = fit_learning(curves, init_steps, learning_model)
            else:
                block = fit_noise_law(curves, learning_model, advantage, init_steps)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    block["fit"]["lr_of_run"] = block["lr_ref"]
    if as_lr_ref is not None:
        block["lr_ref"] = as_lr_ref
    cfgs = [Path(d) / "config.json" for d in runs]
    block["provenance"] = {
        "run_dir": runs[0] if len(runs) == 1 else runs,
        "run_config_sha256": (lambda h: h[0] if len(h) == 1 else h)(
            [sha256_file(c) if c.exists() else None for c in cfgs]
        ),
        "command": cmd,
        "rolloutlab_version": rolloutlab_version(),
    } | ({"note": note} if note else {})
    write_output(merged_output(out, "learning", block), out)
    f = block["fit"]
    if mean_field:
        click.echo(
            f"wrote {out}: kappa {block['kappa']:.4g} +- {f['se']['kappa']:.2g} at lr_ref "
            f"{block['lr_ref']:g}; initial {f['init_pass_rate']['spec']}; RMSE "
            f"{f['replayed']['rmse']:.3f} (sampling noise {f['sampling_noise_rmse']:.3f})"
        )
        return
    click.echo(
        f"wrote {out}: kappa {block['kappa']:.4g}, b_noise {block['b_noise']:.4g} informative "
        f"samples, rho {block['rho']:.3g}"
        f"{'' if f['rho_fitted'] else ' (not fitted: needs 3+ settings with 2+ G)'} at lr_ref "
        f"{block['lr_ref']:g}; initial {f['init_pass_rate']['spec']}; "
        f"{f['runs']} runs at {len(f['settings'])} (G, B) settings"
    )


def expand_runs(paths: tuple[str, ...]) -> list[str]:
    """Run directories from ``--real`` values: a run (it holds ``learner.jsonl`` or a steps
    table) as given, a folder of runs as its run sub-folders (sorted). Raises BadInput on
    a folder holding no run."""
    out = []
    for p in paths:
        d = Path(p)
        is_run = any((d / f).exists() for f in ("learner.jsonl", "steps.parquet", "steps.jsonl"))
        subs = sorted(s for s in d.iterdir() if s.is_dir()) if d.is_dir() and not is_run else []
        runs = [str(s) for s in subs if (s / "learner.jsonl").exists()]
        if d.is_dir() and not is_run and not runs:
            raise BadInput(f"{p}: no run here (no learner.jsonl in it or in its sub-folders)")
        out.extend(runs or [p])
    return out


def _from_verl(verl_dir, out, as_lr_ref, note, group_size, prompts, dispersion, skip_steps, checks):
    """``--verl-tb``: fit, write both blocks (:mod:`calibration.fits.verl_learning`)."""
    cmd = (
        f"rolloutlab calibrate learning --verl-tb {shlex.quote(verl_dir)} --out {shlex.quote(out)}"
    )
    cmd += f" --group-size {group_size} --prompts {prompts} --dispersion {dispersion:g}"
    cmd += f" --skip-steps {skip_steps}" + "".join(f" --check {shlex.quote(c)}" for c in checks)
    if as_lr_ref is not None:
        cmd += f" --as-lr-ref {as_lr_ref:g}"
    if note:
        cmd += f" --note {shlex.quote(note)}"
    try:
        pass_rate, learning = verl_blocks(  # a curve fit: seconds
            verl_dir, group_size, prompts, dispersion, skip_steps, checks, cmd, note
        )
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if as_lr_ref is not None:
        learning["lr_ref"] = as_lr_ref
    d = merged_output(out, "pass_rate", pass_rate) | {"learning": learning}
    write_output(d, out)
    f = learning["fit"]
    click.echo(
        f"wrote {out}: pass_rate {pass_rate['spec']}, kappa {learning['kappa']:.4g} "
        f"+- {f['se']['kappa']:.2g} at lr_ref {learning['lr_ref']:g}; RMSE {f['rmse']:.4f} "
        f"(sampling noise {f['sampling_noise_rmse']:.4f}), R^2 {f['r2_vs_constant']:.3f}"
        + "".join(f"; {h['run']}: {_heldout_line(h)}" for h in f["heldout"])
    )


def _heldout_line(h: dict) -> str:
    """One held-out run's RMSE beside its best naive rule, and whether the model beats it."""
    best = h["best_naive"]
    if best is None:
        return f"RMSE {h['rmse']:.4f}"
    b = h["baselines_rmse"][best]
    verdict = "beats it" if h["rmse"] < b else "does NOT beat it"
    return f"RMSE {h['rmse']:.4f}, best naive rule {best} {b:.4f} ({verdict})"
