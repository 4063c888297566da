"""``recruiter web``: the dashboard and its JSON API under ``/api`` (docs/guides/web.md)."""

from recruiter.web.app import WebConfig, create_app

__all__ = ["WebConfig", "create_app"]
