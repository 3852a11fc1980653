"""``stepwatch image-sides``: a pull request's two images (the image the suite runs in at its merge base and at its
head: stepwatch.toml's ``image``, or the image built from its Dockerfile), as ``upgrade-check`` takes them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from stepwatch.collector.cli.exits import EXIT_OK
from stepwatch.collector.environments import containers
from stepwatch.collector.output.text import publish, step_output
from stepwatch.collector.workflows import image_sides


def register(commands: Any) -> None:
    parser = commands.add_parser("image-sides", help="a pull request's two images (stepwatch.toml's image, or the "
                                 "image its Dockerfile builds), at its merge base and its head")  # fmt: skip
    parser.add_argument("--base", required=True, help="git ref the pull request goes into (its merge base is the "
                        "baseline)")  # fmt: skip
    parser.add_argument("--head", required=True, help="git ref of the pull request: the candidate")
    parser.add_argument("--repo", default=".", help="the git repository (default: this folder)")
    parser.add_argument("--image", help="the image the project's suite runs in (a setting: read at each commit)")
    parser.add_argument("--dockerfile", help=f"where the project's image is built from, when it names no image (a "
                        f"setting: read at each commit; default {image_sides.DEFAULT_DOCKERFILE})")  # fmt: skip
    parser.add_argument("--container-engine", choices=containers.ENGINES, help="the engine that builds a "
                        "Dockerfile's image (default: the first of podman and docker found)")  # fmt: skip
    parser.add_argument("--out", help="also write the markdown to this file (nothing where no image changed)")
    parser.add_argument("--github-output", metavar="FILE", help="append changed=, baseline= and candidate= (as "
                        "upgrade-check takes them) to this file ($GITHUB_OUTPUT)")  # fmt: skip
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    found = image_sides.of_refs(Path(args.repo), args.base, args.head, args.container_engine)
    text = image_sides.markdown(found)
    if text:
        publish(text, args.out)
    else:
        print("no image change: the merge base and the head run in the same image, or neither names one")
    step_output(args.github_output, image_sides.outputs(found))
    return EXIT_OK
