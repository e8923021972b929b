"""The ``rolloutlab`` commands, one module per command group (wired by :mod:`rolloutlab.cli`).

A command parses and checks its options, calls the library (``sim``, ``real``,
``calibration``, ``analysis``), writes what it returns and prints; shared option
parsing, output folders and errors are in :mod:`rolloutlab.commands.common`.
"""
