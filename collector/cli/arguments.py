"""What the commands share: the console, the one-line usage error, the matrix flags (derived from the config
fields' roles), the store and analysis flags, and where a command's store is."""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from stepwatch.collector import metrics
from stepwatch.collector.analysis import calibration, stats
from stepwatch.collector.analysis.thresholds import THRESHOLDS_PATH, Override, load_overrides
from stepwatch.collector.cli.exits import EXIT_USAGE
from stepwatch.collector.config import FLAGGED, ROLES, TYPES, ConfigError, parse_bool
from stepwatch.collector.errors import UsageError
from stepwatch.collector.runner import catalog
from stepwatch.collector.store.files import DB_ENV, DEFAULT_DB
from stepwatch.collector.store.selection import Selection
from stepwatch.trainers.workload import Kind, kind_of

BYTE_UNITS = {"": 1, "B": 1, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "KB": 10**3, "MB": 10**6,
              "GB": 10**9, "TB": 10**12}  # fmt: skip


def parse_bytes(text: str) -> int:
    """An amount of memory: ``12GiB``, ``512MiB``, ``80GB`` or plain bytes."""
    number = text.strip().rstrip("bBiIkKmMgGtT")
    unit = text.strip()[len(number) :].upper()
    try:
        value = float(number) * BYTE_UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount of memory, e.g. 12GiB, 512MiB or 80GB") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the amount must be positive")
    return int(value)


DEFAULT_OUT = Path("data/results")
FORMATS = ("table", "markdown", "json")  # how a report is printed
# The progress bar of commands that run trials (run, upgrade-check).
PROGRESS_COLUMNS = (
    TextColumn("{task.description}"),
    BarColumn(),
    MofNCompleteColumn(),
    TimeElapsedColumn(),
    TextColumn("ETA"),
    TimeRemainingColumn(),
)

console = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 150)


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (and exit code 2), like every other stepwatch error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def comma_list(cast: Callable[[str], Any] = str, choices: Sequence[Any] | None = None) -> Callable[[str], list[Any]]:
    """An argparse type for comma-separated values, each cast and checked against ``choices``."""

    def parse(text: str) -> list[Any]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        try:
            values = [cast(v) for v in values]
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        if choices is not None:
            for value in values:
                if value not in choices:
                    raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(map(str, choices))}")
        return values

    return parse


COUNTERS_WORD = "counters"  # in a list of metrics: every deterministic metric (collector.metrics.COUNTERS)


def metric_list(text: str) -> list[str]:
    """Comma-separated metric names, where ``counters`` stands for every counter of the compiled step."""
    named = comma_list(choices=(*metrics.METRICS, COUNTERS_WORD))(text)
    expanded = (metrics.COUNTERS if name == COUNTERS_WORD else (name,) for name in named)
    return list(dict.fromkeys(name for names in expanded for name in names))


def _bool_word(name: str) -> Callable[[str], bool]:
    def parse(text: str) -> bool:
        try:
            return parse_bool(text, name)
        except ConfigError:
            raise ValueError(f"{text!r} is not one of off, on") from None

    return parse


def add_matrix_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite and one flag per flagged config field (collector.config), shared by run and upgrade-check."""
    parser.add_argument("--suite", default="smoke", help="bundled suite name (smoke, gpu-nightly, ...) or a TOML path")
    for name in FLAGGED:
        role, kind = ROLES[name], TYPES[name]
        cast = _bool_word(name) if kind is bool else kind
        described = role.help or (", ".join(map(str, role.choices)) if role.choices else None)
        # A renamed field keeps its former flag (--backend for --device), so existing scripts still run.
        former = [f"--{role.key_name.replace('_', '-')}"] if role.key_name else []
        if former:
            described = f"{described} ({former[0]}: its former name)"
        parser.add_argument(role.flag, *former, type=comma_list(cast, role.choices or None), dest=name, help=described)
    parser.add_argument(
        "--script", metavar="PATH",
        help="your training script as the benchmark (it marks its steps with stepwatch.steps); its arguments "
        "follow --, e.g. --script train.py -- --epochs 1",
    )  # fmt: skip
    parser.add_argument("script_args", nargs="*", metavar="-- ARGS", help="the script's arguments")
    parser.add_argument("--price-per-hour", type=float, help="USD per hour for the whole run, overriding the catalog")
    parser.add_argument("--prices", type=Path, default=catalog.PRICES_PATH, help="price catalog TOML")
    parser.add_argument(
        "--own-price", type=float, metavar="USD",
        help="your own price (a commitment, a neocloud, your hardware) per device-hour of an accelerator, or per hour "
        "of a CPU host, ahead of the catalog for every run; each row says whose price it was costed at (price_whose)",
    )  # fmt: skip
    parser.add_argument("--own-price-source", metavar="TEXT", help="where your own price comes from, for the rows")


def add_environment_arguments(parser: argparse.ArgumentParser) -> None:
    """How a package set's environment is built (``collector.environments.virtualenvs.ensure``): run --with,
    upgrade-check."""
    parser.add_argument("--reuse-site-packages", action="store_true",
                        help="build the environments on top of this interpreter's packages (faster; the pinned "
                        "requirements still win)")  # fmt: skip
    parser.add_argument("--pip-arg", action="append", default=[], help="extra pip install argument (repeatable)")


# What opens the regression issue (and posts the webhook): a regression a verifying check reproduced (the default:
# the history only nominates), or one the history alone confirmed (for a team that cannot spare the check's minutes).
ISSUE_ON = ("reproduced", "confirmed")


def add_issue_argument(parser: argparse.ArgumentParser) -> None:
    """--issue-on: what makes a regression one that fails the night and opens its issue (detect, verify, publish)."""
    parser.add_argument(
        "--issue-on", choices=ISSUE_ON, default=ISSUE_ON[0],
        help="what opens the regression issue and fails the night: a regression that `stepwatch alerts verify` "
        "reproduced on one runner (default), or one the nightly history alone confirmed",
    )  # fmt: skip


PROFILE_ALL = 1 << 30  # --profile without a count: every trial


def add_profile_argument(parser: argparse.ArgumentParser) -> None:
    """--profile [N] (``collector.trial.profiles``) and --compile-cache DIR: run, upgrade-check and bisect."""
    parser.add_argument(
        "--profile", nargs="?", type=int, const=PROFILE_ALL, default=0, metavar="N",
        help="after its timed steps, a trial records a profile of a few more steps and its per-op times (read by "
        "`stepwatch explain`): the first N trials of every config and side, or every trial without N",
    )  # fmt: skip
    parser.add_argument(
        "--compile-cache", type=Path, metavar="DIR",
        help="keep the compiler's output here between trials (XLA on TensorFlow and JAX, inductor on torch): a "
        "trial that finds its step there skips compiling it. Its compile time is then not a compile: each row "
        "says whether its trial was cold or warm (compile_cache)",
    )  # fmt: skip


def profiled_trials(args: argparse.Namespace) -> int:
    """How many trials of every config record a profile (0: none)."""
    if args.profile < 0:
        raise UsageError("--profile N: N must be at least 1 (0: no profiles)")
    return args.profile


def price_options(args: argparse.Namespace) -> dict[str, Any]:
    """The prices a command that runs trials costs them at (``runner.RunOptions``): --price-per-hour, else your own
    price, else the catalog's first match."""
    prices = catalog.load_prices(args.prices)
    if args.own_price is not None:
        prices = [catalog.own_price(args.own_price, args.own_price_source, datetime.date.today()), *prices]
    return {"price_per_hour": args.price_per_hour, "prices": prices}


def trial_options(args: argparse.Namespace) -> dict[str, Any]:
    """What the trial arguments of run, upgrade-check and bisect set in ``runner.RunOptions``."""
    return {"profile": profiled_trials(args), "compile_cache": args.compile_cache}


def matrix_values(args: argparse.Namespace) -> dict[str, list[Any] | None]:
    """Field -> the values its flag listed (None where the flag was not given); ``--script PATH -- ARGS`` names
    a script as the model, with its arguments (quoted as a shell would)."""
    values = {name: getattr(args, name) for name in FLAGGED}
    if args.script_args and not args.script:
        given = shlex.join(args.script_args)
        raise UsageError(f"{given!r}: arguments after -- are a script's; name the script with --script PATH")
    if args.script:
        if kind_of(args.script) is not Kind.SCRIPT:
            raise UsageError(f"--script {args.script}: a script is a Python file (path/train.py)")
        values["model"] = [args.script]  # the script alone: a project's models setting is not run beside it
        values["script_args"] = [shlex.join(args.script_args)]
    return values


def add_db_argument(parser: argparse.ArgumentParser, default: Path | None = None) -> None:
    where = default or f"${DB_ENV} or {DEFAULT_DB}"
    parser.add_argument(
        "--db",
        default=default,
        help=f"store: a DuckDB file, or a shared store's address, iceberg+postgresql://...?warehouse=s3://... "
        f"(default {where})",
    )


def db_path(args: argparse.Namespace, synthetic: bool = False, follow: bool = True) -> Path:
    """The store a command works on: --db, else $STEPWATCH_DB, else the default store (a shared store's address
    stands for its local copy, brought up to date unless not ``follow``: an ingest does that itself)."""
    from stepwatch.collector.store import database  # DuckDB: only where a command opens the store

    return database.resolve(args.db, follow) if args.db else database.default_db(synthetic, follow)


def add_analysis_arguments(
    parser: argparse.ArgumentParser,
    several_metrics: bool,
    default_db: Path | None = None,
    calibrated: bool = False,
    stored: bool = False,
) -> None:
    """The options of a command that judges: metrics, output, thresholds, the store and, for a comparison of
    two sides (``calibrated``), the runner's calibration; for one that judges trials already in the store
    (``stored``), whether to leave out those whose machine was flagged (``selection``)."""
    names = ", ".join(metrics.METRICS)
    if several_metrics:
        parser.add_argument(
            "--metric", type=metric_list, default=[metrics.DEFAULT_METRIC],
            help=f"comma-separated metrics (default {metrics.DEFAULT_METRIC}; '{COUNTERS_WORD}': every counter of "
            f"the compiled step, compared exactly): {names}",
        )  # fmt: skip
    else:
        parser.add_argument(
            "--metric", choices=tuple(metrics.METRICS), metavar="METRIC",
            help=f"default {metrics.DEFAULT_METRIC}, or {metrics.IMPORTED_METRIC} for a store of imported results "
            f"alone: {names}",
        )  # fmt: skip
    parser.add_argument("--format", choices=FORMATS, default="table")
    parser.add_argument("--out", help="also write the report (markdown, or JSON with --format json) to this file")
    parser.add_argument("--thresholds", type=Path, help=f"per-series threshold overrides (default {THRESHOLDS_PATH})")
    if calibrated:
        parser.add_argument(
            "--calibration", metavar="PATH",
            help="the runner's calibration (stepwatch calibrate), whose between-environment variation widens the "
            f"intervals; 'none' for none (default ${calibration.CALIBRATION_ENV}, else "
            f"{calibration.CALIBRATION_DIR}/<runner label>.json when it exists)",
        )  # fmt: skip
    if stored:
        parser.add_argument(
            "--exclude-flagged", action="store_true",
            help="leave out trials whose machine ran throttled or shared, or was not read (the row's throttled and "
            "shared flags)",
        )  # fmt: skip
    add_db_argument(parser, default_db)


def selection(args: argparse.Namespace, text: str | None) -> Selection:
    """A selection the command line gives, less the flagged trials where --exclude-flagged asks."""
    parsed = Selection.parse(text)
    return parsed.unflagged() if getattr(args, "exclude_flagged", False) else parsed


def calibrated_between(args: argparse.Namespace) -> dict[str, stats.Between]:
    """Per metric, the between-environment variance of the calibration a comparison uses (--calibration)."""
    found = calibration.find(args.calibration)
    return found.between() if found else {}


def overrides(args: argparse.Namespace) -> list[Override]:
    return load_overrides(args.thresholds)


def add_numerics_argument(parser: argparse.ArgumentParser, default: str = "show") -> None:
    """--numerics: what a series whose training changed (``collector.analysis.numerics``) does to the exit code."""
    parser.add_argument(
        "--numerics", choices=("show", "fail"), default=default,
        help=f"a series whose training changed (its numerics verdict beside its speed verdict): show it first in "
        f"the report, or also exit 1 (default {default})",
    )  # fmt: skip


def add_import_arguments(parser: argparse.ArgumentParser) -> None:
    """A team's own benchmark command as the measurement (``workflows.import_check``): settings ``import`` and
    ``import-results`` in stepwatch.toml (``init --import`` writes them)."""
    parser.add_argument(
        "--import", dest="import_command", metavar="COMMAND",
        help="your benchmark command (run by a shell in the project's folder): its output is imported as stepwatch's "
        "own measurement (pytest-benchmark, asv, Google Benchmark, ...: docs/imports)",
    )  # fmt: skip
    parser.add_argument("--import-results", metavar="PATH",
                        help="what --import's command writes, relative to the folder it runs in")  # fmt: skip
    parser.add_argument("--import-format", metavar="FORMAT", help="its format (default: known by its content)")


def import_command(args: argparse.Namespace) -> Any:
    """The command of ``add_import_arguments`` (``import_check.Command``), or None where none is given."""
    if not getattr(args, "import_command", None):
        return None
    from stepwatch.collector import imports  # a project of its own command's only
    from stepwatch.collector.workflows.import_check import Command

    if not args.import_results:
        raise UsageError("--import needs --import-results PATH: the file or folder the command writes")
    if args.import_format and args.import_format not in imports.FORMATS:
        raise UsageError(f"--import-format {args.import_format!r} is not one of {imports.known()}")
    return Command(args.import_command, args.import_results, args.import_format)
