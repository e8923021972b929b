"""Models of what a rollout and a step cost and yield: response lengths (the
:class:`LengthModel` protocol and its lognormal, empirical, step-indexed and grouped
implementations), the accelerator cost model and its roofline, pass rates and rewards,
learning progress, the staleness/learning-rate collapse model and the collapse-horizon
law fitted to measured grids.
"""

from rolloutlab.sim import lazy_exports

# module of this package -> the interface names it defines
__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "lengths": "LengthModel LognormalLengths EmpiricalLengths finish_reasons",
        "stepped_lengths": "SteppedEmpiricalLengths",
        "dynamics": "GroupLengths step_lengths",
        "drift": "Drift",
        "cost": "LinearCost ConstantCost",
        "roofline": "RooflineConfig roofline roofline_cost",
        "hardware": "ModelConfig Accelerator get_model get_gpu",
        "passrate": "PassRateModel FixedPassRate BetaPassRate EmpiricalPassRate parse_pass_rate",
        "rewards": "RewardConfig RewardTracker",
        "learning": "LearningParams LearningModel",
        "staleness": "StalenessParams predict_eta_max",
        "horizon": "HorizonLaw HorizonFit fit_horizon",
    },
)
