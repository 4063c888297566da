"""Who may act through the dashboard (docs/guides/web.md): a person signs in with the token, then
each form carries the session's CSRF token from the dashboard's origin; a script sends
``Authorization: Bearer TOKEN`` to the API (never a cookie). Reading needs nothing."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

SESSION_COOKIE = "recruiter_session"
SESSIONS_KEPT = 1000
"""Sessions remembered at most; the oldest are forgotten first."""
SESSION_IDLE = 8 * 3600.0
"""Seconds a session may go unused before it ends (a stolen cookie does not last)."""

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


class Refused(Exception):
    """An action that may not be done: the message says why and what to do."""

    def __init__(self, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Session:
    id: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    """The cookie's value: whoever holds it acts as this session."""
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    name: str = field(default_factory=lambda: secrets.token_hex(4))
    """A label of its own, for the audit trail: it names the session and cannot act."""
    seen: float = field(default_factory=time.monotonic)
    """When it was last used (a monotonic clock's seconds): idle too long, it ends."""


class Guard:
    """The token, the sessions signed in with it, and the checks every action passes."""

    def __init__(self, token: str | None, read_only: bool) -> None:
        self.token = token or None
        self.read_only = read_only
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    @property
    def actions_allowed(self) -> bool:
        return self.token is not None and not self.read_only

    def why_not(self) -> str:
        if self.read_only:
            return "this dashboard is read-only (started with --read-only)"
        return "actions need a token: start recruiter web with --token or RECRUITER_WEB_TOKEN"

    def token_matches(self, given: str | None) -> bool:
        if self.token is None or not given:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def sign_in(self, given: str | None) -> Session:
        if not self.actions_allowed:
            raise Refused(self.why_not())
        if not self.token_matches(given):
            raise Refused("wrong token", status=401)
        session = Session()
        with self._lock:
            if len(self._sessions) >= SESSIONS_KEPT:
                self._sessions.pop(next(iter(self._sessions)))
            self._sessions[session.id] = session
        return session

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The signed-in session of this cookie, if it has not gone idle too long."""
        if not cookie or not self.actions_allowed:
            return None
        now = time.monotonic() if now is None else now
        with self._lock:
            session = self._sessions.get(cookie)
            if session is None:
                return None
            if now - session.seen > SESSION_IDLE:
                del self._sessions[cookie]
                return None
            session.seen = now
            return session

    def sign_out(self, cookie: str | None) -> None:
        with self._lock:
            self._sessions.pop(cookie or "", None)

    def check_form_action(
        self, cookie: str | None, csrf: str | None, origin: str | None, this_origin: str
    ) -> Session:
        """A page's action: signed in, with the session's CSRF token, from ``this_origin``."""
        if not self.actions_allowed:
            raise Refused(self.why_not())
        check_same_origin(origin, this_origin)
        session = self.session(cookie)
        if session is None:
            raise Refused("sign in with the token first", status=401)
        if not csrf or not hmac.compare_digest(csrf.encode(), session.csrf.encode()):
            raise Refused("the form's CSRF token does not match: reload the page and try again")
        return session

    def check_api_action(self, authorization: str | None) -> None:
        """A script's action: ``Authorization: Bearer TOKEN``."""
        if not self.actions_allowed:
            raise Refused(self.why_not())
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise Refused("send the token as Authorization: Bearer TOKEN", status=401)
        if not self.token_matches(given.strip()):
            raise Refused("wrong token", status=401)


def check_same_origin(origin: str | None, this_origin: str) -> None:
    """Refuse an ``Origin`` (or ``Referer``) other than ``this_origin`` (scheme, host, port), or
    opaque (``null``), or unreadable; none at all passes (the CSRF token still protects it)."""
    if not origin:
        return
    if origin == "null":
        raise Refused("a request from an opaque origin may not act")
    theirs = origin_parts(origin)
    if theirs is None or theirs != origin_parts(this_origin):
        raise Refused(f"a request from {origin!r} may not act on this dashboard ({this_origin})")


DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_parts(url: str) -> tuple[str, str, int] | None:
    """``https://A`` is ``("https", "a", 443)``; None if not an origin (or a user name in it)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
        return None
    return scheme, parts.hostname.lower(), DEFAULT_PORTS[scheme] if port is None else port
