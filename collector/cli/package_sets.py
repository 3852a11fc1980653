"""``stepwatch package-sets``: the two package sets of a pull request (two git refs of a repository's pin
files, or two sets of files) and what changes between what pip resolves them to."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from stepwatch.collector.cli.arguments import add_environment_arguments, console
from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.environments import pinfiles
from stepwatch.collector.environments.pinfiles import PinFileError
from stepwatch.collector.errors import UsageError
from stepwatch.collector.output.package_sets import sides_json, sides_markdown, sides_text, step_outputs
from stepwatch.collector.output.text import publish, step_output
from stepwatch.collector.workflows import package_sets as deriving

RENDER = {"text": sides_text, "markdown": sides_markdown, "json": sides_json}


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "package-sets",
        help="a pull request's two package sets (from two git refs or two sets of pin files) and what changes",
    )
    parser.add_argument("--base", help="git ref the pull request goes into: the baseline is its merge base with --head")
    parser.add_argument("--head", help="git ref of the pull request: the candidate")
    parser.add_argument("--repo", default=".", help="the git repository (default: this folder)")
    parser.add_argument(
        "--files", nargs="+", default=list(pinfiles.PIN_FILES), metavar="PATTERN",
        help="pin files at each ref, as GitHub path filters (default: " + " ".join(pinfiles.PIN_FILES) + ")",
    )  # fmt: skip
    parser.add_argument("--baseline-file", nargs="+", default=[], help="instead of refs: the baseline's pin files")
    parser.add_argument("--candidate-file", nargs="+", default=[], help="instead of refs: the candidate's pin files")
    parser.add_argument("--format", choices=tuple(RENDER), default="text")
    parser.add_argument("--out", help="also write the report to this file")
    parser.add_argument(
        "--github-output", metavar="FILE",
        help="append changed=, baseline= and candidate= (as upgrade-check takes them) to this file ($GITHUB_OUTPUT)",
    )  # fmt: skip
    add_environment_arguments(parser)
    parser.set_defaults(handler=run)


NO_PIN_CHANGE = "no package change"


def _no_pin_change(args: argparse.Namespace, baseline: pinfiles.Source) -> int:
    """No pin file differs between the merge base and the head: said (a check a branch protection can require
    passes), nothing resolved, changed=false."""
    files = ", ".join(baseline.paths) or "none"
    line = f"{NO_PIN_CHANGE}: no pin file changed between the merge base and the head (pin files: {files})"
    text = f"## stepwatch upgrade check: {NO_PIN_CHANGE}\n\n{line}\n" if args.format == "markdown" else line + "\n"
    publish(text, args.out)
    step_output(args.github_output, "changed=false\nbaseline=\ncandidate=\npins=unchanged\n")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    refs, files = (args.base, args.head), (args.baseline_file, args.candidate_file)
    if not (all(refs) and not any(files)) and not (all(files) and not any(refs)):
        raise UsageError("give --base and --head (git refs), or --baseline-file and --candidate-file")
    try:
        if all(refs):
            baseline, candidate = deriving.of_refs(Path(args.repo), args.base, args.head, tuple(args.files))
            if deriving.same_files(baseline, candidate):
                return _no_pin_change(args, baseline)
        else:
            baseline, candidate = pinfiles.on_disk(args.baseline_file), pinfiles.on_disk(args.candidate_file)
        found = deriving.derive_both(baseline, candidate, args.reuse_site_packages, tuple(args.pip_arg), console.print)
    except PinFileError as error:
        raise UsageError(str(error)) from None
    publish(RENDER[args.format](found), args.out)
    step_output(args.github_output, step_outputs(found))
    return EXIT_OK
