"""Grid commands: ``sweep`` (controllers over B x workers x max_num_seqs x seeds),
``stability`` (the collapse model over S x lr x seed) and ``advise`` (a search for the
fastest safe setting); each point runs through one executor (:mod:`.executor`: local or
Ray) into an append-only results file (:mod:`.store`), with the shared options and
driver in :mod:`.options`."""
