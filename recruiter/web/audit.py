"""The dashboard's audit trail (docs/guides/web.md): each action, on what, by which session (its
label, which cannot act), what came of it. Untrusted values have their control characters shown
as escapes: they neither steer the operator's terminal nor forge a line of the log.

>>> shown("mail\\x1b[2J\\nforged line")
'mail\\\\x1b[2J\\\\nforged line'
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from recruiter.errors import DatabaseUnavailable, RecruiterError
from recruiter.monitoring.printable import printable

logger = logging.getLogger(__name__)


def shown(value: Any) -> str:
    """``value`` as text on one line, every control character made visible."""
    return printable(str(value), lines=False)


@dataclass(frozen=True)
class Actor:
    """Who acts: a signed-in session, by its label, or a script through the API."""

    via: str
    """``page`` (a form, from a browser's session) or ``api`` (the bearer token)."""
    session: str | None
    """The session's label; None through the API, or with no session signed in."""
    client: str

    def __str__(self) -> str:
        if self.via == "api":
            who = "the api"
        else:
            who = "no session" if self.session is None else f"session {self.session}"
        return f"{who} from {shown(self.client)}"


def target_in_words(target: Mapping[str, Any]) -> str:
    """``job 6b05…``, ``group mail``, ``12 jobs where state=failed, group=mail``."""
    parts = []
    if "job" in target:
        parts.append(f"job {shown(target['job'])}")
    if "selected" in target:
        parts.append(f"{target['selected']} jobs")
    if "filter" in target:
        said = ", ".join(
            f"{name}={shown(value)}" for name, value in target["filter"].items() if value
        )
        parts.append(f"where {said or 'every job'}")
    if "group" in target:
        parts.append(f"group {shown(target['group'])}")
    if "scheduler" in target:
        parts.append(f"scheduler {shown(target['scheduler'])}")
    return " ".join(parts)


@dataclass
class Act:
    """An action under way: what it said, once done."""

    actor: Actor
    action: str
    target: dict[str, Any]
    said: str = ""


def log(act: Act, outcome: str, level: int = logging.INFO) -> None:
    """One line: ``audit: retry job 6b05… by session 1a2b3c4d from 127.0.0.1: done: …``."""
    logger.log(
        level,
        "audit: %s by %s: %s: %s",
        f"{shown(act.action)} {target_in_words(act.target)}".strip(),
        act.actor,
        outcome,
        shown(act.said),
        extra=_facts(act.action, act.actor, outcome, act.said, target=act.target),
    )


@contextmanager
def acting(
    actor: Actor, action: str, target: dict[str, Any], refused_level: int = logging.WARNING
) -> Iterator[Act]:
    """Log the block's action: done (with the ``said`` it set), refused (a
    :class:`RecruiterError`, at ``refused_level``) or failed (the database away, or a bug)."""
    act = Act(actor, action, target)
    try:
        yield act
    except Exception as error:
        if isinstance(error, DatabaseUnavailable):
            act.said, outcome, level = str(error), "failed", logging.WARNING
        elif isinstance(error, RecruiterError):
            act.said, outcome, level = str(error), "refused", refused_level
        else:
            act.said, outcome, level = f"{type(error).__name__}: {error}", "failed", logging.ERROR
        log(act, outcome, level)
        error.recruiter_audited = True  # type: ignore[attr-defined]
        raise
    log(act, "done")


def audited(error: BaseException) -> bool:
    """Whether ``error`` was logged already, by the action it ended (:func:`acting`)."""
    return getattr(error, "recruiter_audited", False) is True


def refused_request(method: str, path: str, actor: Actor, why: str) -> None:
    """A request refused (token, CSRF token, origin, read-only): who tried what, and why not."""
    logger.warning(
        "audit: refused %s %s by %s: %s",
        shown(method),
        shown(path),
        actor,
        shown(why),
        extra=_facts(f"{method} {path}", actor, "refused", why),
    )


def _facts(action: str, actor: Actor, outcome: str, said: str, **target: Any) -> dict[str, Any]:
    """A line's facts, as fields of its JSON line (``audit``)."""
    return {
        "audit": {
            "action": action,
            **target,
            "session": actor.session,
            "via": actor.via,
            "client": actor.client,
            "outcome": outcome,
            "said": said,
        }
    }
