"""``compare groups``: predicted against measured straggler rate P(max/median > tau) for
every G up to the logged one, on a grouped per-sample run's later steps or on another run
of its configuration, and the forecast of the steps after the fit (:mod:`.compare`; the
fits and predictions are :mod:`calibration.validation.groups` and
:mod:`calibration.validation.forecast`)."""
