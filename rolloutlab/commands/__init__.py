"""The ``rolloutlab`` commands, a sub-package per command group (wired lazily by
:mod:`rolloutlab.cli`).

A command parses and checks its options, calls the library (``sim``, ``real``,
``calibration``, ``analysis``), writes what it returns and prints.

- :mod:`.options`: what every command shares (option types, list options, output
  folders, the one-line error; scenario and reward options of the simulator commands).
- :mod:`.simulate`: ``sim``, ``tail-study``, ``scenario from-verl``, ``check-controller``.
- :mod:`.grid`: the grid commands ``sweep``, ``stability`` and ``advise``, and the
  executor and results file they run their points through.
- :mod:`.calibrate`: ``calibrate ...``, a scenario fitted to real logs.
- :mod:`.compare`: ``compare ...``, ``validate ...`` and ``report``, predictions beside
  measurements.
- :mod:`.real`: ``real ...``, GRPO on a real model.
"""
