"""Models of what a rollout and a step cost and yield: response lengths (the
:class:`LengthModel` protocol and its lognormal, empirical, step-indexed and grouped
implementations), the accelerator cost model and its roofline, pass rates and rewards,
learning progress, and the staleness/learning-rate collapse model.
"""

from rolloutlab.sim import lazy_exports

_INTERFACE = {
    "LengthModel": "lengths",
    "LognormalLengths": "lengths",
    "EmpiricalLengths": "lengths",
    "finish_reasons": "lengths",
    "SteppedEmpiricalLengths": "stepped_lengths",
    "GroupLengths": "dynamics",
    "Drift": "dynamics",
    "step_lengths": "dynamics",
    "LinearCost": "cost",
    "ConstantCost": "cost",
    "RooflineConfig": "roofline",
    "roofline": "roofline",
    "roofline_cost": "roofline",
    "ModelConfig": "hardware",
    "Accelerator": "hardware",
    "get_model": "hardware",
    "get_gpu": "hardware",
    "PassRateModel": "passrate",
    "FixedPassRate": "passrate",
    "BetaPassRate": "passrate",
    "EmpiricalPassRate": "passrate",
    "parse_pass_rate": "passrate",
    "RewardConfig": "rewards",
    "RewardTracker": "rewards",
    "LearningParams": "learning",
    "LearningModel": "learning",
    "StalenessParams": "staleness",
    "predict_eta_max": "staleness",
}
"""Exported name -> the module of this package that defines it."""

__all__ = sorted(_INTERFACE)
__getattr__, __dir__ = lazy_exports(__name__, _INTERFACE)
