"""What every command shares: the option types (:mod:`.types`), list options, output
folders and the one-line error (:mod:`.common`), the scenario (:mod:`.scenario`) and
reward (:mod:`.learning`) options of the simulator commands, and the grouped per-sample
file options of ``calibrate groups`` and ``compare groups``/``replay``/``run-spread``
(:mod:`.grouped`)."""
