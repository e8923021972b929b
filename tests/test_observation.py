import numpy as np
import pytest
from rolloutlab.sim.control.controllers import StaticG
from rolloutlab.sim.control.observation import observe_step


class Recorder:
    name = "rec"
    observes = ("rewards", "gen_time_s")

    def __init__(self):
        self.seen = []

    def observe(self, lengths, rewards=None, gen_time_s=None):
        self.seen.append((lengths, rewards, gen_time_s))


def test_plain_controller_gets_lengths_only():
    c = StaticG(4)
    observe_step(c, [[1, 2], [3, 4]], rewards=np.ones((2, 2)), gen_time_s=1.0)
    assert c.steps_observed == 1


def test_declared_extras_are_passed_missing_ones_as_none():
    r = Recorder()
    rew = np.array([[0.0, 1.0]])
    observe_step(r, [[5, 6]], rewards=rew, step_time_s=3.0)
    lengths, rewards, gen = r.seen[0]
    assert lengths == [[5, 6]] and rewards is rew and gen is None


def test_unknown_extra_is_refused():
    r = Recorder()
    r.observes = ("rewards", "temperature")
    with pytest.raises(ValueError, match="temperature"):
        observe_step(r, [[1]])
    with pytest.raises(ValueError, match="bogus"):
        observe_step(StaticG(2), [[1]], bogus=1)


class PromptAware(StaticG):
    proposes = ("prompt_ids",)

    def __init__(self, G):
        super().__init__(G)
        self.given = []

    def propose(self, prompt_ids=None):
        self.given.append(prompt_ids)
        return self.G


def test_propose_step_passes_prompt_ids_only_to_controllers_that_declare_them():
    from rolloutlab.sim.control.observation import propose_step

    ids = np.arange(3)
    aware = PromptAware(4)
    assert propose_step(aware, ids) == 4 and aware.given == [ids]
    assert propose_step(aware) == 4 and aware.given[-1] is None
    assert propose_step(StaticG(2), ids) == 2  # plain propose(): no keyword


# -- the versioned observation ----------------------------------------------------------


class Whole(StaticG):
    """Records every :class:`Observation` it is handed."""

    observes = ("observation",)

    def __init__(self, G):
        super().__init__(G)
        self.obs = []

    def observe(self, lengths, observation=None):
        super().observe(lengths)
        self.obs.append(observation)


def test_a_controller_asking_for_the_observation_gets_every_field():
    from rolloutlab.sim.control.observation import OBSERVATION_VERSION, Observation

    w = Whole(2)
    fr = np.array([["stop", "length"]])
    observe_step(w, [[5, 9]], finish_reasons=fr, learner_time_s=2.0, wall_clock_s=10.0)
    (o,) = w.obs
    assert isinstance(o, Observation) and o.version == OBSERVATION_VERSION == 2
    assert o.lengths == [[5, 9]] and o.finish_reasons is fr
    assert (o.learner_time_s, o.wall_clock_s, o.rewards, o.gen_time_s) == (2.0, 10.0, None, None)


def test_a_controller_needing_a_newer_observation_is_refused_by_name():
    w = Whole(2)
    w.observation_version = 3
    with pytest.raises(
        ValueError, match="needs observation version 3; this rolloutlab gives version 2"
    ):
        observe_step(w, [[1, 2]])


@pytest.mark.parametrize("bad", [0, -4, 2.0, True, None, "8"])
def test_propose_step_refuses_anything_but_a_positive_int(bad):
    from rolloutlab.sim.control.observation import propose_step

    ctl = StaticG(2)
    ctl.propose = lambda: bad
    with pytest.raises(ValueError, match=r"propose\(\) returned .*G must be a positive int"):
        propose_step(ctl)
    ctl.propose = lambda: np.int64(4)
    assert propose_step(ctl) == 4 and type(propose_step(ctl)) is int


def _check_run_observations(obs, steps, cap):
    """Every step's observation has finish reasons shaped as lengths ("length" exactly at
    the cap), positive learner time, and a wall clock that is the step rows' t_end."""
    assert len(obs) == steps.height
    for o, t_end in zip(obs, steps["t_end"].to_list()):
        L = np.asarray(o.lengths)
        assert o.finish_reasons.shape == L.shape
        assert ((o.finish_reasons == "length") == (L >= cap)).all()
        assert o.learner_time_s > 0 and o.gen_time_s > 0
        assert o.wall_clock_s == pytest.approx(t_end)
        assert o.step_time_s >= o.gen_time_s + o.learner_time_s - 1e-9


@pytest.mark.parametrize("engine", ["simpy", "fast"])
def test_sync_pipelines_hand_over_finish_reasons_learner_time_and_wall_clock(tiny_scenario, engine):
    from rolloutlab.sim.pipelines.sync import RunConfig, run_sync
    from rolloutlab.sim.pipelines.sync_fast import run_sync_fast

    w = Whole(4)
    run = run_sync if engine == "simpy" else run_sync_fast
    _, steps = run(tiny_scenario, w, RunConfig(steps=5, prompts=4, seed=1))
    _check_run_observations(w.obs, steps, tiny_scenario.lengths.max_response_length)
    assert [o.learner_time_s for o in w.obs] == steps["train_time"].to_list()


def test_async_pipeline_hands_over_learner_time_and_wall_clock(tiny_scenario):
    from rolloutlab.sim.pipelines.async_pipeline import run_pipeline
    from rolloutlab.sim.pipelines.spec import parse_pipeline
    from rolloutlab.sim.pipelines.sync import RunConfig

    w = Whole(4)
    _, steps, _ = run_pipeline(
        tiny_scenario, w, RunConfig(steps=6, prompts=4, seed=2), parse_pipeline("one-step-off")
    )
    assert len(w.obs) >= 4
    cap = tiny_scenario.lengths.max_response_length
    ends = set(steps["t_end"].to_list())
    for o in w.obs:
        assert ((o.finish_reasons == "length") == (np.asarray(o.lengths) >= cap)).all()
        assert o.learner_time_s > 0 and o.wall_clock_s in ends
