"""Figures and outputs shared across questions: the simulator's and real runs' figures
(:mod:`.plots`), the predicted-against-measured figures (:mod:`.compare_plots`,
:mod:`.groups_plot`), the output folders of ``compare idle`` and ``compare collapse``
(:mod:`.compare_outputs`), and the HTML report (:mod:`.report`: each study's answer first,
:mod:`.answers`), with the one place numbers become text (:mod:`.numbers`)."""
