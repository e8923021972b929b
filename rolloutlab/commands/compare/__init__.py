"""Predictions beside measurements: ``rolloutlab compare ...`` (idle, collapse, learning
and ``report`` in :mod:`.group`; :mod:`.horizon`, :mod:`.scheduler`,
:mod:`.learning_budget`, :mod:`.verl_tb`, :mod:`.replay`, :mod:`.run_spread`; ``compare
groups`` sits beside ``calibrate groups``, whose options it shares).
``rolloutlab validate ...`` is the deprecated spelling of ``compare ...``."""
