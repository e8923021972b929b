"""Calibration files (the scenario JSON that ``sim --calibration`` loads) built from logs:
verl TensorBoard runs (:mod:`.verl`), ServeGen's reasoning lengths (:mod:`.servegen`),
grouped per-sample traces (:mod:`.groups`), written with provenance by :mod:`.writer`.
"""
