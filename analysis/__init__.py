"""Predictions beside measurements, figures and reports: one sub-package per question.

- :mod:`.inputs`: reading a run directory (trace tables, configuration, step layouts).
- :mod:`.idle`: predicted against measured makespan, slot idle and stragglers, step by
  step (cost fit, multi-turn steps, CPU and probe clocks).
- :mod:`.groups`: predicted against measured straggler rate per group size G on held-out
  steps or runs of a grouped per-sample log, and its forecast.
- :mod:`.learning`: predicted against measured time to a target (step cost, seeds,
  held-out targets, directions in G and B, the rollout-budget study).
- :mod:`.collapse`: the collapse model and the collapse-horizon law against measured
  stability grids, and the phase diagram.
- :mod:`.scheduler`: the simulator's paged engine against vLLM's scheduler.
- :mod:`.advise`: the search for the fastest safe setting, its trial pricing and figure.
- :mod:`.figures`: the figures and output folders the others share, and the HTML report.
"""
