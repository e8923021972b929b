"""rolloutlab.calibration: reads what runs wrote and fits the simulator to it.

Sub-packages by role: :mod:`.readers` (logs and traces in), :mod:`.fits` (model fits),
:mod:`.validation` (predictions held against data not fitted on), :mod:`.scenarios`
(calibration files out).
"""
