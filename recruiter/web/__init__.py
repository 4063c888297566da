"""``recruiter web``: the dashboard and its JSON API under ``/api``, acting through the
:class:`recruiter.Queue` methods the command line calls (``pip install 'recruiter[web]'``;
docs/guides/web.md)."""

from recruiter.web.app import WebConfig, create_app

__all__ = ["WebConfig", "create_app"]
