"""A confirmed regression posted to a chat webhook: Slack's incoming-webhook JSON (``{"text": ...}``), which
Mattermost, Rocket.Chat, Discord's ``/slack`` endpoint and most chat tools take as it is."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from stepwatch.collector.errors import UsageError

ENV = "STEPWATCH_WEBHOOK"  # the webhook's address, from a secret (an address that posts is one)
TIMEOUT_S = 10


def check(url: str) -> str:
    """``url`` when it is an http(s) address; a usage error (one line) otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c in url for c in " \n\r\t"):
        raise UsageError("--webhook: not an http(s) address (a chat tool's incoming webhook)")
    return url


def post(url: str, text: str) -> str | None:
    """Post ``text`` to the webhook; None when it took it, else why not (in one line: the verdict is not the
    webhook's, and a chat tool that is down fails nothing)."""
    request = urllib.request.Request(check(url), data=json.dumps({"text": text}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310 - http(s) only (check)
            return None if 200 <= answer.status < 300 else f"HTTP {answer.status}"
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code}"
    except (urllib.error.URLError, OSError) as error:
        return str(getattr(error, "reason", error))
