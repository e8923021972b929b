"""What every command shares: the option types (:mod:`.types`), list options, output
folders and the one-line error (:mod:`.common`), and the scenario (:mod:`.scenario`) and
reward (:mod:`.learning`) options of the simulator commands."""
