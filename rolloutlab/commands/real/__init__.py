"""``rolloutlab real ...``: GRPO on a real model driven by the simulator's controllers:
``sync``, ``async`` and ``task-lengths`` in :mod:`.group`, ``stability`` in
:mod:`.stability`, and the options they share (:mod:`.run_options`,
:mod:`.loss_options`, :mod:`.detector_options`). torch is imported only when a run
starts."""
