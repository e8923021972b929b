"""Predictions beside measurements: ``rolloutlab compare ...`` (idle, collapse, learning
and ``report`` in :mod:`.group`; :mod:`.horizon`, :mod:`.scheduler`,
:mod:`.learning_budget`, :mod:`.verl_tb`, :mod:`.groups`, :mod:`.replay`,
:mod:`.run_spread`; the grouped-file options these share with ``calibrate groups`` are
:mod:`rolloutlab.commands.options.grouped`).
``rolloutlab validate ...`` is the deprecated spelling of ``compare ...``."""
