"""``rolloutlab.testing``: check a group-size controller against the contract the
simulator and the real runners rely on, in one line from a user's pytest::

    from rolloutlab.testing import check_controller

    def test_my_controller():
        check_controller(MyController)  # or "my_file.py:MyController:k=v", or a factory

or from the command line: ``rolloutlab check-controller SPEC``. The hypothesis
strategies of realistic observation streams are in :mod:`rolloutlab.testing.strategies`
(usable in a user's own ``@given`` tests), the properties in
:mod:`rolloutlab.testing.contract`; docs/controllers.md describes both.
"""

from rolloutlab.testing.check import CheckReport, PropertyResult, check_controller
from rolloutlab.testing.contract import ContractViolation
from rolloutlab.testing.laws import StepLaw, materialize

__all__ = [
    "CheckReport",
    "ContractViolation",
    "PropertyResult",
    "StepLaw",
    "check_controller",
    "materialize",
]
