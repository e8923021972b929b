"""``compare idle``: predicted against measured generation makespan, slot idle fraction
and stragglers, step by step (:mod:`.compare`), with the cost fit to every rollout's
finish time (:mod:`.finish_fit`), multi-turn steps (:mod:`.turns`, :mod:`.turn_schedule`)
and the probe-corrected CPU clock (:mod:`.probe_clock`)."""
