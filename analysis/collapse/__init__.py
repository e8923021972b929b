"""Collapse: the collapse model fitted to a measured stability grid and its scaling laws
(:mod:`.compare`), the collapse-horizon law per mechanism (:mod:`.horizon`,
:mod:`.horizon_plot`, :mod:`.mechanism_metrics`), and the phase diagram of a grid
(:mod:`.stability_fit`, :mod:`.stability_plots`)."""
