"""``recruiter web``: the dashboard, and its JSON API.

Pages for the overview, the jobs (filtered, paged), one job with every attempt, the
workers, the groups and the repeatable jobs; actions (retry, cancel, recover, run now,
a group's limits) through the same :class:`recruiter.Queue` methods the command line
uses; a JSON API under ``/api`` described by ``/api/openapi.json``.

An optional extra: ``pip install 'recruiter[web]'`` (FastAPI, uvicorn, Jinja2). See
docs/web.md for why these, and for the security model (:mod:`recruiter.web.security`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recruiter.web.app import WebConfig, create_app


if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        # the application on first use: its modules import this package's other modules,
        # which would otherwise import the application back while it is being made
        if name in __all__:
            return getattr(importlib.import_module("recruiter.web.app"), name)
        raise AttributeError(f"module 'recruiter.web' has no attribute {name!r}")


__all__ = ["WebConfig", "create_app"]
