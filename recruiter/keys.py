"""Keys: what a job is about (an account, a document), for its group's limits and
order per key (:meth:`recruiter.JobSpec.keyed`; docs/guides/keys.md).

A keyed job's document holds ``key`` and ``key_order`` (its own id; a retry of it keeps
the one it retries, so it takes its place in the order). The leading recruiter's round
hands out a key's jobs within its group's ``key_concurrency``, ``key_rate`` and
``ordering`` (:mod:`recruiter.store.keys`).

>>> check_key("account-42")
'account-42'
"""

from __future__ import annotations

import unicodedata
from typing import Any

from recruiter.errors import InvalidJob

MOST_KEY = 200
"""The longest key, in characters."""


def check_key(key: Any) -> str:
    """``key`` if a job may be keyed by it; else :class:`InvalidJob` saying what to change."""
    if not isinstance(key, str) or not key.strip():
        raise InvalidJob(f"a key is a non-empty string, got {key!r}")
    if len(key) > MOST_KEY:
        raise InvalidJob(f"a key is at most {MOST_KEY} characters, got {len(key)}")
    if any(unicodedata.category(character) in ("Cc", "Cf", "Cs") for character in key):
        raise InvalidJob(
            f"a key holds no control or invisible characters, got {key!r}: "
            "use letters, digits and punctuation"
        )
    return key
