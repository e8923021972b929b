"""Reading one run directory (real or simulated) for the comparisons: its trace tables,
configuration, engine and each step's layout (:mod:`.run_input`)."""
