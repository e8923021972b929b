"""What every command shares: list options (``--prompts 16,64``), claiming an output
folder, and the one-line error (:class:`BadInput`, exit 2: bad input or a missing extra;
:class:`RunFailed`, exit 1; :func:`fail`).

A run's provenance (``config.json`` with library versions) is written by
:func:`rolloutlab.sim.scenario.provenance.write_config`, which real runs use too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click
from click.core import ParameterSource

if TYPE_CHECKING:
    pass


def out_option(
    help: str,
    *,
    dest: str = "out_dir",
    file: bool = False,
    as_path: bool = True,
    callback: Callable[[click.Context, click.Parameter, Any], Any] | None = None,
):
    """The required ``--out`` of every command: a folder, or with ``file`` a file; the
    command receives it as ``dest``, a :class:`~pathlib.Path` (``as_path=False``: the
    string given). ``help`` says what the command writes there; ``callback`` checks the
    value at parse time (:func:`calibration_out`)."""
    return click.option(
        "--out",
        dest,
        required=True,
        type=click.Path(file_okay=file, dir_okay=not file, path_type=Path if as_path else None),
        callback=callback,
        help=help,
    )


OUT_DIR = out_option(
    "Output directory (new, or an earlier output of the same command, which it replaces)."
)
"""``--out DIR`` passed as ``out_dir`` (a :class:`~pathlib.Path`): decorate a command with it."""


def collapse_split(default: str):
    """``--held-out-by`` and ``--held-out-value`` of the collapse studies (``compare collapse``,
    ``compare horizon``): which runs the fit never sees (:func:`analysis.collapse.compare.split_grid`).
    ``--split``, the old spelling of ``--held-out-by``, still works (``--split`` is the GPU
    split of ``sim`` and ``advise``), as does ``--held-out`` for the value (``--held-out``
    names held-out run files in ``compare groups``)."""

    def wrap(f):
        f = click.option(
            "--held-out-value",
            "held_out",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="With --held-out-by lr or S: the one lr or S value held out [default: lr "
            "alternate values; S the middle one].",
        )(f)
        f = renamed_option(
            "--held-out",
            "--held-out-value",
            "held_out",
            type=click.FloatRange(min=0, min_open=True),
        )(f)
        f = renamed_option(
            "--split", "--held-out-by", "split", type=click.Choice(["seed", "lr", "S"])
        )(f)
        return click.option(
            "--held-out-by",
            "split",
            type=click.Choice(["seed", "lr", "S"]),
            default=default,
            show_default=True,
            help="Hold out odd seeds, alternate learning rates, or one S of the stability grid "
            "(its sync interval, or its staleness bound with --pipeline bounded; the middle "
            "of the grid's S values unless --held-out-value names it).",
        )(f)

    return wrap


STEP_CLOCK = click.option(
    "--clock",
    type=click.Choice(["cpu", "wall"]),
    default="cpu",
    show_default=True,
    help="Step times of a vLLM scheduler measurement: the engine process's CPU time, or wall time.",
)
"""``--clock cpu|wall`` (``compare scheduler``, ``calibrate vllm-steps``)."""


def real_option(help: str, **path: Any):
    """The required ``--real PATH`` option (passed as ``real_dir``, a :class:`~pathlib.Path`);
    ``path`` goes to :class:`click.Path` (e.g. ``exists=True`` or ``file_okay=False``)."""
    return click.option(
        "--real", "real_dir", required=True, type=click.Path(path_type=Path, **path), help=help
    )


def calibration_out(ctx: click.Context, param: click.Parameter, value: str | None):
    """Click callback of a ``--out FILE`` that receives a whole calibration JSON: refuses
    (exit 2, at parse time, before any work) a folder, an existing file that is not a
    calibration JSON, or an unwritable folder (:func:`calibration.scenarios.writer.check_replaceable`)."""
    from rolloutlab.calibration.scenarios.writer import OutputError, check_replaceable

    if value is None:
        return value
    try:
        check_replaceable(value)
    except OutputError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return value


CALIBRATION_OUT = out_option(
    "Calibration JSON to write (new, or an existing calibration it replaces).",
    dest="out",
    file=True,
    as_path=False,
    callback=calibration_out,
)
"""``--out FILE`` of a command that writes a whole calibration JSON (:func:`calibration_out`)."""


def cost_from_option(help: str):
    """``--cost-from NAME|FILE`` (default: the bundled ``gsm8k`` scenario): the scenario
    whose cost model (and more, as ``help`` says) a calibration command reuses."""
    return click.option("--cost-from", default="gsm8k", show_default=True, help=help)


class OutDirError(ValueError):
    """The output directory holds another run's files or cannot be created; the message
    names it."""


class BadInput(click.ClickException):
    """One-line error for bad input (an option, file, row or field), exit code 2 like
    click's own usage errors: the project's bad-input convention."""

    exit_code = 2


class RunFailed(click.ClickException):
    """One-line error for a run that failed for another reason than its input (a missing
    engine package, a generator that died, a simulation that cannot go on), exit code 1."""

    exit_code = 1


def fail(exc: Exception) -> NoReturn:
    """Raise ``exc``'s message as a one-line click error: :class:`RunFailed` (exit 1) when
    ``exc`` is a :class:`RuntimeError` (the project's type for a run that fails, e.g.
    ``GeneratorDied``), else :class:`BadInput` (exit 2): input errors are
    :class:`ValueError` subclasses naming the option, file, row or field, and a package
    this installation lacks is an :class:`ImportError` naming the extra that installs it
    (:class:`rolloutlab.real.rundir.extras.MissingExtra`; the one rule for every missing extra)."""
    if isinstance(exc, RuntimeError):
        raise RunFailed(str(exc)) from None
    raise BadInput(str(exc)) from None


def parse_list(
    option: str,
    text: str,
    cast: Callable[[str], Any],
    check: Callable[[Any], bool] = lambda v: True,
    expected: str = "",
) -> list:
    """``"1,2, 4"`` -> ``[cast("1"), cast("2"), cast("4")]`` (empty items skipped); for a
    new option prefer the click type :class:`rolloutlab.commands.options.types.CommaList` (finite,
    ranged, unique items).

    Raises :class:`click.BadParameter` naming ``option`` (exit 2) on an empty list, an
    item ``cast`` refuses, or values failing ``check`` (the message says ``expected``).
    """
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise click.BadParameter(
            f"expected a comma-separated list, got {text!r}", param_hint=option
        )
    try:
        values = [cast(x) for x in items]
    except ValueError:
        raise click.BadParameter(
            f"expected a list of numbers, got {text!r}", param_hint=option
        ) from None
    bad = [v for v in values if not check(v)]
    if bad:
        raise click.BadParameter(f"expected {expected}, got {bad}", param_hint=option)
    return values


def int_list(name: str):
    """A click callback parsing a comma-separated list of ints (None stays None); a bad
    item raises :class:`click.BadParameter` naming ``name``."""

    def parse(ctx, param, value):
        if value is None:
            return None
        try:
            return [int(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise click.BadParameter(
                f"expected comma-separated integers, got {value!r}", param_hint=name
            ) from None

    return parse


def owner_of(path: Path) -> str | None:
    """The command that wrote ``path/config.json`` (its ``command`` or ``kind`` field), or
    None when there is no such file or it names none."""
    cfg = path / "config.json"
    try:
        data = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    return (data.get("command") or data.get("kind")) if isinstance(data, dict) else None


def claim_out_dir(path: str | Path, command: str) -> Path:
    """Create ``path`` for the results of ``command``, or reuse it if it is empty or holds
    an earlier result of the same command (which the new one replaces).

    Call it after every input check and before any long run, so a refused command leaves
    no folder behind. Raises: :class:`OutDirError` if ``path`` is a file, or a non-empty
    directory whose ``config.json`` was written by another command (or is missing), e.g.
    a real run's directory: nothing is written then.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutDirError(f"{p}: --out must be a directory, found a file")
    if p.is_dir() and any(p.iterdir()):
        owner = owner_of(p)
        if owner != command:
            what = (
                f"the results of `{owner}`"
                if owner
                else "other files (no config.json of this command)"
            )
            raise OutDirError(f"{p}: already holds {what}; choose another --out or remove it")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutDirError(f"{p}: cannot create --out ({exc.strerror})") from None
    return p


def claim(out: str | Path, command: str) -> Path:
    """:func:`claim_out_dir`, its refusal raised as :class:`BadInput` (exit 2)."""
    try:
        return claim_out_dir(out, command)
    except OutDirError as exc:
        fail(exc)


def first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` (itself included) that does not exist yet: what
    creating ``path`` would create and what to remove to undo it (None: it exists)."""
    path = Path(path).absolute()
    if path.exists():
        return None
    top = path
    while not top.parent.exists():
        top = top.parent
    return top


def check_creatable(path: str | Path, folder: bool = True) -> None:
    """Refuse (:class:`BadInput`, exit 2, before any work) an output ``path`` that cannot
    be made: with ``folder``, ``path`` is an existing file; in any case its nearest
    existing ancestor (``path`` itself for an existing folder) is not a writable folder
    (a file in the way, no permission)."""
    p = Path(path).absolute()
    if folder and p.exists() and not p.is_dir():
        raise BadInput(f"{path}: --out must be a directory, found a file")
    top = p if (folder and p.is_dir()) else p.parent
    while not top.exists():
        top = top.parent
    if not top.is_dir() or not os.access(top, os.W_OK | os.X_OK):
        raise BadInput(f"{path}: cannot write --out ({top} is not a writable folder)")


def check_own_file(path: str | Path, is_ours: Callable[[Path], bool], what: str) -> None:
    """Refuse (:class:`BadInput`, exit 2) an output file ``path`` that exists and is not
    ``what`` this command writes (``is_ours(path)`` false), or that cannot be created
    (:func:`check_creatable`): a command never overwrites a file it did not write."""
    p = Path(path)
    if p.is_dir():
        raise BadInput(f"{path}: is a folder; --out takes a file name")
    if p.exists() and not is_ours(p):
        raise BadInput(f"{path}: exists and is not {what}; refusing to overwrite it")
    check_creatable(p, folder=False)


def json_with_keys(*keys: str) -> Callable[[Path], bool]:
    """``is_ours`` for :func:`check_own_file`: the file is a JSON object with ``keys``."""

    def check(p: Path) -> bool:
        try:
            d = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            return False
        return isinstance(d, dict) and all(k in d for k in keys)

    return check


def is_png(p: Path) -> bool:
    """``is_ours`` for a PNG output: the file starts with the PNG signature."""
    try:
        with open(p, "rb") as f:
            return f.read(8) == b"\x89PNG\r\n\x1a\n"
    except OSError:
        return False


def check_writable(path: Path) -> None:
    """Raise :class:`OutDirError` naming ``path`` when no file can be created in it (a
    read-only folder): checked before the work, not after it."""
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise OutDirError(f"{path}: cannot write in --out ({exc.strerror})") from None


@contextmanager
def claimed(out: str | Path, command: str) -> Iterator[Path]:
    """Claim ``out`` for ``command`` (:func:`claim_out_dir`, then :func:`check_writable`)
    around the work that writes it; yields the folder.

    The one way a command owns its output folder: a refusal is :class:`BadInput` (exit 2,
    nothing written); if the body fails (any error, Ctrl-C included) the folders this call
    created are removed again, so a failed command leaves nothing behind (a folder that
    existed before is left as it is); an ``OSError`` of the body (disk full, a file
    removed under it) becomes :class:`RunFailed` (exit 1) naming it.
    """
    created = first_missing(Path(out))
    try:
        path = claim_out_dir(out, command)
        check_writable(path)
    except OutDirError as exc:
        _undo(created)
        fail(exc)
    try:
        yield path
    except OSError as exc:
        _undo(created)
        where = exc.filename or path
        raise RunFailed(f"{where}: cannot write the output ({exc.strerror or exc})") from None
    except BaseException:
        _undo(created)
        raise


def _undo(created: Path | None) -> None:
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)


def deprecation_note(old: str, new: str) -> str:
    """The one line a retired spelling prints on stderr: ``note: OLD is deprecated, use NEW``."""
    return f"note: {old} is deprecated, use {new}"


def renamed_option(old: str, new: str, dest: str, **kwargs: Any):
    """A hidden option ``old`` (a command's earlier spelling of ``new``) that fills the
    same parameter ``dest``: it still works, with one line on stderr
    (``note: OLD is deprecated, use NEW``), and ``--help`` shows only ``new``. ``kwargs``
    (``type``, ``metavar``) are ``new``'s, so both spellings check the value alike.

    The old spelling parses into a slot of its own (click keys parsed values by
    parameter name, so a shared name could not tell which spelling was typed) and hands
    its value to ``dest`` as a command-line value, which outranks ``new``'s default."""

    def note(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if (
            value is not None
            and ctx.get_parameter_source(param.name) == ParameterSource.COMMANDLINE
        ):
            click.echo(deprecation_note(old, new), err=True)
            ctx.params[dest] = value
            ctx.set_parameter_source(dest, ParameterSource.COMMANDLINE)
        return value

    return click.option(
        old,
        f"_renamed_{dest}",
        hidden=True,
        expose_value=False,
        callback=note,
        help=f"Old spelling of {new}.",
        **kwargs,
    )


def renamed_argument(parser: argparse.ArgumentParser, old: str, new: argparse.Action) -> None:
    """:func:`renamed_option` for an argparse script (``bench/``): a hidden argument ``old``
    (the script's earlier spelling of ``new``, the action ``parser.add_argument`` returned)
    that fills ``new``'s destination with ``new``'s type, printing
    :func:`deprecation_note` on stderr when given."""
    spelling = new.option_strings[-1]

    class Renamed(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            print(deprecation_note(old, spelling), file=sys.stderr)
            setattr(namespace, self.dest, values)

    alias = parser.add_argument(old, dest=new.dest, help=argparse.SUPPRESS, action=Renamed)
    alias.type = new.type  # checked and converted as the new spelling's value
