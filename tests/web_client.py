"""The dashboard driven in-process (FastAPI's ``TestClient``), as every web test reads
it: a client, and one signed in with the token and its session's CSRF token."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient

from recruiter import Queue
from recruiter.web import WebConfig, create_app

TOKEN = "a-token-of-twenty-chars"
"""The dashboard's token in these tests (long enough to be accepted)."""
BASE = "http://127.0.0.1:8087"
"""Where the client says it is (its requests' host and origin)."""


def client(queue: Queue, **config: Any) -> TestClient:
    """A browser of the dashboard of ``queue``, configured by ``config``
    (:class:`~recruiter.web.WebConfig`'s fields)."""
    return TestClient(create_app(queue, WebConfig(**config)), base_url=BASE)


def signed_in(queue: Queue) -> tuple[TestClient, str]:
    """A client signed in with the token, and its CSRF token (read from a page)."""
    browser = client(queue, token=TOKEN)
    reply = browser.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert reply.status_code == 303
    found = re.search(r'name="csrf" value="([^"]+)"', browser.get("/").text)
    assert found is not None
    return browser, found.group(1)
