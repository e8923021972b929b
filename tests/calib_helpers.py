"""Helpers for the calibration tests: write small verl-style event files."""

from __future__ import annotations

from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

SAMPLE_RUN = Path(__file__).parent / "data" / "verl_tb" / "q3b_fsdp_base"


def write_events(folder: Path, rows: dict[int, dict[str, float]]) -> Path:
    """Write ``{step: {tag: value}}`` as scalar events with TensorBoard's own writer
    (the one torch's SummaryWriter uses); return the event file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    w = EventFileWriter(str(folder))
    for step, tags in rows.items():
        values = [summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in tags.items()]
        w.add_event(
            event_pb2.Event(
                step=step, wall_time=1.0 + step, summary=summary_pb2.Summary(value=values)
            )
        )
    w.close()
    return next(folder.glob("events.out.tfevents.*"))


def verl_row(step: int, **override: float) -> dict[str, float]:
    """A plausible verl step (5120 responses of ~280 tokens), with overrides by tag
    (use ``__`` for ``/``, e.g. ``timing_s__gen=float('nan')``)."""
    row = {
        "response_length/mean": 280.0 + step,
        "response_length/max": 900.0,
        "response_length/min": 60.0,
        "response_length/clip_ratio": 0.0,
        "prompt_length/mean": 104.0,
        "perf/total_num_tokens": 5120 * (384.0 + step),
        "timing_s/gen": 30.0 + 0.1 * step,
        "timing_s/update_actor": 100.0,
        "timing_s/old_log_prob": 20.0,
        "timing_s/ref": 20.0,
        "timing_s/reshard": 1.0,
    }
    row.update({k.replace("__", "/"): v for k, v in override.items()})
    return row
