"""Learner roofline (sim.models.learner_cost) and its fit to verl logs
(calibration.fits.learner_fit)."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rolloutlab.calibration.fits.learner_fit import fit_efficiency, predict
from rolloutlab.calibration.readers.verl_tb import VerlLogError, read_run
from rolloutlab.sim.models.hardware import get_gpu, get_model
from rolloutlab.sim.models.learner_cost import (
    Layout,
    LearnerEfficiency,
    Network,
    learner_phases,
    ring_s,
    weight_sync_s,
)

M, H20, H100 = get_model("qwen2.5-7b"), get_gpu("h20"), get_gpu("h100")
TB = Path(__file__).parent / "data" / "verl_tb" / "q3b_fsdp_base"


def test_forward_is_2NT_and_update_6NT_at_full_efficiency_on_one_gpu():
    T = 1e6
    p = learner_phases(M, H100, Layout(1), T, LearnerEfficiency(1.0, 1.0))
    n = M.n_params()
    assert p["timing_s/old_log_prob"] == pytest.approx(2 * n * T / H100.bf16_flops)
    adam = 36 * n / H100.hbm_bytes_per_s
    assert p["timing_s/update_actor"] == pytest.approx(6 * n * T / H100.bf16_flops + adam)
    assert learner_phases(M, H100, Layout(1), T, ref=False)["timing_s/ref"] == 0.0


def test_ring_collectives_match_the_textbook_volumes():
    assert ring_s("all_reduce", 1e9, 1, 1e9, 0.0) == 0.0
    assert ring_s("all_gather", 8e9, 8, 1e9, 0.0) == pytest.approx(7.0)
    assert ring_s("all_reduce", 8e9, 8, 1e9, 0.0) == pytest.approx(14.0)


@settings(max_examples=40, deadline=None)
@given(
    tokens=st.floats(1e4, 1e8),
    nodes=st.integers(2, 16),
    tp=st.sampled_from([1, 2, 4, 8]),
    fsdp=st.booleans(),
)
def test_more_tokens_cost_more_and_a_big_batch_trains_faster_on_more_nodes(tokens, nodes, tp, fsdp):
    lay = Layout(8 * nodes, tp=tp, fsdp=fsdp)
    a = learner_phases(M, H100, lay, tokens)
    b = learner_phases(M, H100, lay, 2 * tokens)
    for k in a:
        assert b[k] >= a[k] > 0
        assert b[k] <= 2 * a[k] + 1e-9  # constant terms (DP, optimizer) do not double
    big = 1e7 * nodes  # compute-dominated: more nodes are faster despite the slower links
    one_node = learner_phases(M, H100, Layout(8, tp=tp, fsdp=fsdp), big)
    many = learner_phases(M, H100, lay, big)
    assert many["timing_s/update_actor"] < one_node["timing_s/update_actor"]


def test_a_layout_whose_tp_x_pp_does_not_divide_the_gpus_is_refused():
    with pytest.raises(ValueError, match="does not divide the 12 GPUs"):
        Layout(12, tp=8)
    with pytest.raises(ValueError, match="must be >= 1"):
        Layout(0)


@pytest.mark.parametrize("bw", [0.0, float("nan"), -1.0, float("inf")])
def test_zero_or_nan_bandwidth_is_refused(bw):
    with pytest.raises(ValueError, match="positive finite"):
        weight_sync_s(15e9, 4, bw)
    with pytest.raises(ValueError, match="positive finite"):
        Network(net_bytes_per_s=bw)


@settings(max_examples=40, deadline=None)
@given(
    gb=st.floats(1.0, 200.0), R=st.integers(1, 256), mode=st.sampled_from(["broadcast", "bucketed"])
)
def test_weight_sync_grows_with_bytes_and_replicas(gb, R, mode):
    S, bw = gb * 1e9, 25e9
    t = weight_sync_s(S, R, bw, mode)
    assert t >= S / bw
    assert weight_sync_s(2 * S, R, bw, mode) > t
    assert weight_sync_s(S, R + 1, bw, mode) > t
    if mode == "bucketed":
        assert t == pytest.approx(R * weight_sync_s(S, 1, bw, mode))
    else:  # pipelined: far below R full copies once R is large
        assert R < 4 or t < R * S / bw / 2


@settings(max_examples=15, deadline=None)
@given(fwd=st.floats(0.1, 0.9), train=st.floats(0.1, 0.9), tp=st.sampled_from([1, 2, 4]))
def test_the_fit_recovers_the_efficiencies_of_synthetic_logs(fwd, train, tp):
    lay, eff = Layout(8, tp=tp), LearnerEfficiency(fwd, train)
    toks = [1.0e6, 1.3e6, 0.9e6, 1.6e6, 1.1e6]
    rows = [
        {"step": i + 1, "perf/total_num_tokens": t, **learner_phases(M, H20, lay, t, eff)}
        for i, t in enumerate(toks)
    ]
    got = fit_efficiency(pl.DataFrame(rows), M, H20, lay, skip=0)
    assert got.forward_mfu == pytest.approx(fwd, rel=1e-9)
    assert got.train_mfu == pytest.approx(train, rel=1e-9)


def test_the_bundled_verl_run_fits_and_is_reproduced():
    table = read_run(TB)
    m, lay = get_model("qwen2.5-3b"), Layout(8)
    eff = fit_efficiency(table, m, H20, lay, source=str(TB))
    assert 0.2 < eff.train_mfu < eff.forward_mfu < 0.8  # verl logged perf/mfu/actor ~0.31
    errors = predict(table, m, H20, lay, eff)["error"].to_list()
    assert all(abs(e) < 0.1 for e in errors)


def test_a_log_without_learner_timings_is_refused_naming_the_tag():
    table = pl.DataFrame({"step": [1, 2], "perf/total_num_tokens": [1e6, 1e6]})
    with pytest.raises(VerlLogError, match="timing_s/old_log_prob"):
        fit_efficiency(table, M, H20, Layout(8), source="x.tfevents")
    assert math.isfinite(learner_phases(M, H20, Layout(8), 0.0)["timing_s/update_actor"])
