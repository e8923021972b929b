import numpy as np
import pytest
from rolloutlab.sim.controllers import StaticG
from rolloutlab.sim.observation import observe_step


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
    from rolloutlab.sim.observation import propose_step

    ids = np.arange(3)
    aware = PromptAware(4)
    assert propose_step(aware, ids) == 4 and aware.given == [ids]
    assert propose_step(aware) == 4 and aware.given[-1] is None
    assert propose_step(StaticG(2), ids) == 2  # plain propose(): no keyword
