"""``recruiter web``: the dashboard, and its JSON API under ``/api``.

Its actions call the same :class:`recruiter.Queue` methods the command line does. An
optional extra: ``pip install 'recruiter[web]'``. docs/guides/web.md describes the
pages, the API and the security model (:mod:`recruiter.web.security`).
"""

from recruiter.web.app import WebConfig, create_app

__all__ = ["WebConfig", "create_app"]
