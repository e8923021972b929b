"""Predictions beside measurements: ``rolloutlab compare ...`` (idle, collapse,
learning and ``report`` in :mod:`.group`; :mod:`.horizon`, :mod:`.scheduler`,
:mod:`.learning_budget`) and ``rolloutlab validate ...`` (:mod:`.validate`, with
:mod:`.replay` and :mod:`.run_spread`)."""
