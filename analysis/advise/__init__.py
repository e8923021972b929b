"""``rolloutlab advise``: the search for the fastest setting that keeps stragglers and
collapse in bounds (:mod:`.search`), one setting priced by the simulator
(:mod:`.evaluate`), and the trials' figure (:mod:`.plots`)."""
