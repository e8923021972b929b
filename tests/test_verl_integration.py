"""verl's per-step ``rollout.n`` from a rolloutlab controller (real.integrations.verl),
checked against verl 0.9.1's own ``DataProto`` and GRPO advantage function on CPU.

verl cannot share this project's environment (its transformers pin), so these tests are
skipped in it and run in the throwaway environment of ``bench/verl_cpu_env.sh`` (verl
installed ``--no-deps`` over this project's packages).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

verl = pytest.importorskip("verl")

import torch
from omegaconf import OmegaConf
from rolloutlab.real.integrations.group_rules import GroupSizeError
from rolloutlab.real.integrations.round_trace import RoundTrace
from rolloutlab.real.integrations.verl import group_size_trainer, round_from_batch
from rolloutlab.sim.control.spec import parse_controller
from verl import DataProto
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

WIDTH = 6  # response width (tokens)


def scored_batch(lengths, scores, uids, prompt_len=3):
    """A verl batch as ``_update_actor`` receives it: masks ``(n, T)``, scores on the last token."""
    n = len(lengths)
    resp = torch.zeros(n, WIDTH)
    tls = torch.zeros(n, WIDTH)
    for i, L in enumerate(lengths):
        resp[i, :L] = 1
        tls[i, L - 1] = scores[i]
    attn = torch.cat([torch.ones(n, prompt_len), resp], dim=1)
    return DataProto.from_single_dict(
        {
            "response_mask": resp,
            "attention_mask": attn,
            "token_level_scores": tls,
            "uid": np.array(uids, dtype=object),
        }
    )


def test_verl_grpo_normalises_unequal_groups_within_themselves():
    scores = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    uids = ["a", "a", "b", "b", "b", "b", "c", "c", "c"]  # groups of 2, 4 and 3
    batch = scored_batch([2] * 9, scores, uids)
    adv, _ = compute_grpo_outcome_advantage(
        batch.batch["token_level_scores"], batch.batch["response_mask"], np.array(uids)
    )
    got = adv[:, 0].numpy()
    s = np.asarray(scores)
    for u in "abc":
        idx = [i for i, v in enumerate(uids) if v == u]
        g = s[idx]
        want = (g - g.mean()) / (g.std(ddof=1) + 1e-6)
        np.testing.assert_allclose(got[idx], want, rtol=1e-5)


def test_a_scored_batch_becomes_the_steps_trace_rows_grouped_by_uid(tmp_path):
    # balance_batch may reorder rows: groups are taken by uid value, not position
    uids = ["p", "q", "p", "q", "q", "p"]
    lengths = [2, 6, 3, 1, 5, 4]
    batch = scored_batch(lengths, [1, 0, 0, 1, 1, 0], uids)
    rec = round_from_batch(batch, step=0, prompt_ids=[10, 11], t_start=0.0, t_gen_end=1.5)
    gen = rec.generated()
    assert rec.G == 3 and rec.grouped(gen.response_tokens) == [[2, 3, 4], [6, 1, 5]]
    assert rec.grouped(gen.finish_reason)[1] == ["length", "stop", "stop"]
    assert gen.prompt_tokens == [3] * 6
    ctl = parse_controller("sagc:candidates=2/3/4,tau=2", seed=0)
    trace = RoundTrace(tmp_path, ctl, tau=2.0)
    trace.open({"framework": "verl", "rollout_times": "step"}, "verl", None)
    metrics = trace.finish(rec, t_end=2.0)
    trace.close()
    rows = pl.read_parquet(tmp_path / "rollouts.parquet")
    assert rows["prompt_id"].to_list() == [10, 10, 10, 11, 11, 11]
    assert rows["reward"].to_list() == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert metrics["rolloutlab/straggler_ratio"] == pytest.approx(6 / 3.5)


def test_a_batch_with_groups_of_two_sizes_is_refused_naming_the_step():
    batch = scored_batch([2, 2, 2], [0, 1, 0], ["a", "a", "b"])
    with pytest.raises(ValueError, match="step 4: verl batch holds groups of sizes"):
        round_from_batch(batch, 4, None, 0.0, 1.0)


class FitLoop:
    """The two calls of verl's ``RayPPOTrainer.fit`` the mixin hooks, in fit's order, with
    fit's own repeat (``rollout.n`` read afresh, ``DataProto.repeat(interleave=True)``)."""

    def __init__(self, config):
        self.config = config
        self.updates = []

    def _get_gen_batch(self, batch):
        return batch

    def _update_actor(self, batch):
        self.updates.append(len(batch))
        return None

    def step(self, prompts: int, lengths_of):
        batch = DataProto.from_single_dict(
            {"uid": np.array([f"u{i}" for i in range(prompts)], dtype=object)}
        )
        self._get_gen_batch(batch)
        n = self.config.actor_rollout_ref.rollout.n
        rep = batch.repeat(repeat_times=n, interleave=True)
        lengths = [lengths_of(i) for i in range(len(rep))]
        scored = scored_batch(
            lengths, [i % 2 for i in range(len(rep))], list(rep.non_tensor_batch["uid"])
        )
        self._update_actor(scored)


def verl_config(dp=2, micro=1):
    return OmegaConf.create(
        {
            "trainer": {"n_gpus_per_node": dp, "nnodes": 1},
            "actor_rollout_ref": {
                "rollout": {"n": 4},
                "actor": {"ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": micro},
            },
        }
    )


def test_the_mixin_sets_rollout_n_per_step_and_traces_each_step(tmp_path):
    (tmp_path / "cycle.py").write_text(
        "class Cycle:\n"
        "    def __init__(self): self.t = 0\n"
        "    def propose(self): return [2, 4, 2][self.t % 3]\n"
        "    def observe(self, lengths): self.t += 1\n"
        "    def state_dict(self): return {'t': self.t}\n"
        "    def load_state_dict(self, s): self.t = s['t']\n"
    )
    ctl = parse_controller(f"{tmp_path / 'cycle.py'}:Cycle")
    trace = RoundTrace(tmp_path / "trace", ctl, tau=2.0)
    trace.open({"framework": "verl"}, "verl", None)
    trainer = group_size_trainer(FitLoop)(verl_config(), controller=ctl, trace=trace, budget=16)
    for _ in range(3):
        trainer.step(4, lambda i: 1 + i % 5)
    trace.close()
    assert trainer.updates == [8, 16, 8]  # B x G rollouts per step, G = 2, 4, 2
    rows = pl.read_parquet(tmp_path / "trace" / "rollouts.parquet")
    assert rows.group_by("step", maintain_order=True).agg(pl.col("group_size").first())[
        "group_size"
    ].to_list() == [2, 4, 2]


def test_a_G_the_data_parallel_split_cannot_take_is_refused_before_generation(tmp_path):
    ctl = parse_controller("static:3")
    trace = RoundTrace(tmp_path, ctl, tau=2.0)
    trainer = group_size_trainer(FitLoop)(verl_config(dp=2), controller=ctl, trace=trace)
    with pytest.raises(
        GroupSizeError,
        match=r"G=3: B x G = 3 x 3 = 9 rollouts is not a multiple of data-parallel size = 2",
    ):
        trainer.step(3, lambda i: 2)
    assert trainer.updates == []


def test_the_gpu_stage_overrides_compose_and_pass_verls_config_checks():
    # bench/verl_group_size_e2e.py's hydra overrides against verl's own ppo_trainer config
    import importlib.util
    from pathlib import Path

    pytest.importorskip("hydra")
    import verl.trainer
    from hydra import compose, initialize_config_dir
    from verl.utils.config import validate_config

    path = Path(__file__).resolve().parents[1] / "bench" / "verl_group_size_e2e.py"
    spec = importlib.util.spec_from_file_location("verl_group_size_e2e", path)
    e2e = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(e2e)
    args = e2e.parse_args(["--model", "/m", "--out", "/o", "--steps", "4"])
    ov = e2e.overrides(args, Path("/t.parquet"), Path("/v.parquet"))
    config_dir = str(Path(verl.trainer.__file__).parent / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=ov)
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.trainer.use_v1 is False
    assert cfg.reward.custom_reward_function.path == str(path)
    validate_config(config=cfg, use_reference_policy=False, use_critic=False)
