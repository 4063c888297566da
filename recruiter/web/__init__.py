"""``recruiter web``: the dashboard, and its JSON API.

Pages for the overview, the jobs (filtered, paged), one job with every attempt, the
workers, the groups and the repeatable jobs; actions (retry, cancel, recover, run now,
a group's limits) through the same :class:`recruiter.Queue` methods the command line
uses; a JSON API under ``/api`` described by ``/api/openapi.json``.

An optional extra: ``pip install 'recruiter[web]'`` (FastAPI, uvicorn, Jinja2). See
docs/guides/web.md for why these, and for the security model (:mod:`recruiter.web.security`).
"""

from recruiter.web.app import WebConfig, create_app

__all__ = ["WebConfig", "create_app"]
