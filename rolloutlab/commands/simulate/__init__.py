"""The simulator on one scenario: ``rolloutlab sim`` (controllers and pipelines side
by side), ``tail-study`` (the ways of attacking the long tail ranked), ``scenario
from-verl`` and ``sim --verl-config`` (a verl trainer config in), ``check-controller``
(a controller against the runners' contract)."""
