"""Controllers from outside the package and the option checks of a
controller spec (nan/inf/out of range): one-line errors naming the spec, the
file, the class, the option or the missing method; exit 2 and nothing written."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from click.testing import CliRunner
from rolloutlab.sim.control.controllers import split_specs
from rolloutlab.sim.control.plugins import entry_point_names
from rolloutlab.sim.control.spec import parse_controller

from rolloutlab.cli import main

EXAMPLE = "examples/controllers/pass_rate_g.py:PassRateG"
BROKEN = "tests/data/controllers/zero_after_straggler.py:ZeroAfterStraggler"


def write(path, text: str):
    path.write_text(textwrap.dedent(text))
    return path


def test_a_file_controller_gets_typed_options_and_the_seed(tmp_path):
    f = write(
        tmp_path / "mine.py",
        """
        class Mine:
            candidates = (2, 4)
            def __init__(self, G: int = 2, scale=1.0, on=False, name_='x', seed=0):
                self.args = (G, scale, on, name_, seed)
            def propose(self): return self.args[0]
            def observe(self, lengths): pass
            def state_dict(self): return {}
            def load_state_dict(self, s): pass
        """,
    )
    ctl = parse_controller(f"{f}:Mine:G=4,scale=2,on=true,name_=abc", seed=7)
    assert ctl.args == (4, 2.0, True, "abc", 7)
    sub = write(
        tmp_path / "sub.py",
        "from rolloutlab.sim.control.controllers import SAGC\nclass Mine(SAGC):\n    pass\n",
    )
    assert parse_controller(f"{sub}:Mine", tau=20.0).tau == 20.0  # a scenario's tau reaches it
    assert parse_controller(f"{sub}:Mine:tau=3", tau=20.0).tau == 3.0  # unless the spec sets it
    assert not hasattr(parse_controller(f"{f}:Mine", tau=20.0), "tau")  # no tau parameter
    assert isinstance(ctl.args[1], float)  # typed by the default, not by the text
    assert ctl.name == f"{f}:Mine:G=4,scale=2,on=true,name_=abc"


def test_the_worked_example_builds_with_a_candidates_list():
    ctl = parse_controller(f"{EXAMPLE}:candidates=2/4/8,hits=1.5")
    assert (ctl.candidates, ctl.hits) == ((2, 4, 8), 1.5)


def test_a_module_controller(tmp_path, monkeypatch):
    write(tmp_path / "user_ctl_mod.py", open(EXAMPLE.split(":")[0]).read())
    monkeypatch.syspath_prepend(str(tmp_path))
    ctl = parse_controller("user_ctl_mod:PassRateG:hits=3")
    assert ctl.hits == 3.0 and type(ctl).__module__ == "user_ctl_mod"
    sys.modules.pop("user_ctl_mod", None)


def test_an_entry_point_controller_by_short_name(tmp_path, monkeypatch):
    write(tmp_path / "ep_ctl_mod.py", open(EXAMPLE.split(":")[0]).read())
    dist = tmp_path / "ep_ctl-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-ctl\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[rolloutlab.controllers]\npassrate = ep_ctl_mod:PassRateG\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entry_point_names.cache_clear()
    try:
        ctl = parse_controller("passrate:hits=4")
        assert ctl.hits == 4.0 and ctl.name == "passrate:hits=4"
        assert split_specs("static:8,passrate:hits=4,decay=0.5,sagc") == [
            "static:8",
            "passrate:hits=4,decay=0.5",
            "sagc",
        ]
    finally:
        entry_point_names.cache_clear()
        sys.modules.pop("ep_ctl_mod", None)


def test_split_specs_keeps_an_external_spec_options_together():
    assert split_specs(f"static:8,{EXAMPLE}:hits=3,decay=0.5,sagc:tau=3,delta=0.2") == [
        "static:8",
        f"{EXAMPLE}:hits=3,decay=0.5",
        "sagc:tau=3,delta=0.2",
    ]


LACKS = """
class Half:
    candidates = (4,)
    def propose(self): return 4
    def observe(self, lengths): pass
"""
RAISES = """
class Raises:
    candidates = (4,)
    def __init__(self):
        raise RuntimeError("no GPU\\nhere")
    def propose(self): return 4
    def observe(self, lengths): pass
    def state_dict(self): return {}
    def load_state_dict(self, s): pass
"""
BAD_CANDIDATES = (  # optional (../shared/ERRATA.md), but checked where given
    RAISES.replace("Raises", "BadCands")
    .replace('        raise RuntimeError("no GPU\\nhere")', "        pass")
    .replace("    candidates = (4,)\n", "    candidates = (0, 4)\n")
)

NOT_JSON = (
    RAISES.replace("Raises", "NotJson")
    .replace('        raise RuntimeError("no GPU\\nhere")', "        pass")
    .replace("def state_dict(self): return {}", "def state_dict(self): return {'seen': set()}")
)
NAN_STATE = NOT_JSON.replace("NotJson", "NanState").replace("set()", "float('nan')")


@pytest.mark.parametrize(
    "source,spec,message",
    [
        (None, "missing.py:X", "file missing.py not found"),
        (LACKS, "{f}:Nope", "has no class 'Nope'"),
        (LACKS, "{f}:Half", "class Half ({f}) lacks state_dict, load_state_dict"),
        ("x = (", "{f}:X", "cannot load {f}: SyntaxError"),
        (RAISES, "{f}:Raises", "constructor raised RuntimeError: no GPU here"),
        (BAD_CANDIDATES, "{f}:BadCands", "needs a 'candidates' attribute"),
        (NOT_JSON, "{f}:NotJson", "state_dict() is not JSON (TypeError: Object of type set"),
        (NAN_STATE, "{f}:NanState", "state_dict() is not JSON (ValueError: Out of range float"),
        (
            None,
            EXAMPLE + ":bogus=1",
            "option 'bogus': not accepted (options: candidates, hits, decay)",
        ),
        (None, EXAMPLE + ":hits=nan", "option 'hits': expected a finite number, got 'nan'"),
        (None, EXAMPLE + ":hits=1,hits=2", "option 'hits': given twice"),
        (None, EXAMPLE + ":hits=-1", "need hits > 0"),
        (None, EXAMPLE + ":seed=3", "option 'seed': set by the command"),
        (None, "no_such_module_xyz:Ctl", "cannot import module 'no_such_module_xyz'"),
        (None, "frobnicate", "expected static:G, sagc"),
    ],
)
def test_bad_external_specs_are_one_line_errors_naming_what_is_wrong(
    tmp_path, source, spec, message
):
    f = tmp_path / "ctl.py"
    if source is not None:
        write(f, source)
    spec, message = spec.format(f=f), message.format(f=f)
    with pytest.raises(ValueError) as err:
        parse_controller(spec)
    text = str(err.value)
    assert text.startswith(f"controller spec {spec!r}: ") and message in text, text
    assert "\n" not in text


@pytest.mark.parametrize(
    "spec,message",
    [
        ("sagc:tau=nan", "option 'tau': expected a finite number, got 'nan'"),
        ("sagc:delta=inf", "option 'delta': expected a finite number"),
        ("sagc:step_time_budget_s=1e999", "expected a finite number"),
        ("lagc:c_max=-inf", "option 'c_max': expected a finite number"),
        ("lagc:pop_gamma=1.5", "pop_gamma must be in (0, 1]"),
        ("sagc:radius=1.5", "option 'radius': expected an integer"),
        ("sagc:candidates=4/nan", "option 'candidates': expected an integer"),
        ("sagc:tau=3,tau=4", "option 'tau': given twice"),
        ("sagc:tau", "option 'tau': expected key=value"),
        ("sagc:gamma=0", "gamma must be in (0, 1]"),
        ("static:0", "static:G with G a positive int"),
    ],
)
def test_builtin_options_refuse_nan_inf_and_out_of_range(spec, message):
    with pytest.raises(ValueError) as err:
        parse_controller(spec)
    assert f"controller spec {spec!r}" in str(err.value) and message in str(err.value)


@pytest.mark.parametrize(
    "args",
    [
        ["sim", "--controller", "sagc:tau=nan", "--steps", "2"],
        ["sim", "--controller", "static:8,missing.py:X", "--steps", "2"],
        ["sweep", "--controller", f"{EXAMPLE}:bogus=1", "--steps", "2"],
        ["real", "sync", "--controller", "sagc:delta=inf", "--steps", "1"],
        ["real", "async", "--controller", f"{EXAMPLE}:hits=nan", "--steps", "1"],
        ["check-controller", "sagc:tau=nan"],
    ],
)
def test_the_cli_refuses_a_bad_controller_with_exit_2_and_writes_nothing(tmp_path, args):
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main, args + ([] if args[0] == "check-controller" else ["--out", str(out)])
    )
    assert res.exit_code == 2, res.output
    assert "controller spec" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output
    assert not out.exists()


def test_a_controller_that_proposes_zero_mid_run_is_a_one_line_error(tmp_path):
    """The broken controller passes every check before the run (it proposes 8 until it
    has seen a long straggler), then proposes G = 0: one line, exit 2."""
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main, ["sim", "--controller", BROKEN, "--steps", "40", "--out", str(out)]
    )
    assert res.exit_code == 2, res.output
    assert "propose() returned 0; G must be a positive int" in res.output
    assert "Traceback" not in res.output
    assert not out.exists() or not any(out.iterdir())  # claimed, nothing written


FLOAT_G = """
class FloatG:
    candidates = (4,)
    def propose(self): return 4.0
    def observe(self, lengths): pass
    def state_dict(self): return {}
    def load_state_dict(self, s): pass
"""


@pytest.mark.parametrize("command", [["sim", "--controller"], ["real", "sync", "--controller"]])
def test_a_controller_that_proposes_a_non_int_is_refused_before_anything_is_written(
    tmp_path, command
):
    f = write(tmp_path / "float_g.py", FLOAT_G)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, [*command, f"{f}:FloatG", "--steps", "2", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "propose() returned 4.0; G must be a positive int" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("command", ["sim", "sweep"])
def test_sim_and_sweep_run_a_file_controller_beside_the_builtins(
    tmp_path, calibration_file, command
):
    from tests.cli_helpers import invoke_on

    out = tmp_path / "out"
    spec = f"{EXAMPLE}:candidates=2/4/8,hits=1"
    extra = ["--seeds", "1"] if command == "sweep" else []  # one seed: 0
    res = invoke_on(
        command, calibration_file, out, "--controller", f"static:4,{spec}", "--steps", "3", *extra
    )
    assert res.exit_code == 0, res.output
    import polars as pl

    table = pl.read_csv(out / ("summary.csv" if command == "sim" else "runs.csv"))
    assert table["controller"].to_list() == ["static:4", spec]
    assert json.loads((out / "config.json").read_text())["controllers"] == ["static:4", spec]
