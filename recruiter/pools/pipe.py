"""What the two sides of the processes pool share: the pipe's BSON, how often they look
at it, the hooks that run in the child, the error of a child off the protocol."""

from __future__ import annotations

from typing import Any

from bson.codec_options import CodecOptions

from recruiter.errors import RecruiterError

TICK = 0.05
"""Seconds between two looks at the pipe (or at the worker): a stop lands between them."""
CODEC: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=True)
"""How both sides read the pipe's BSON: dates aware, as the store reads them."""
PIPE_EVERY = 1.0
"""Seconds between a job process's progress messages, at the least (the latest is sent)."""
HOOKS = ("after_success", "after_failure", "after_last_failure", "finalize")
"""The workable's hooks, run in the child where the job's object and exception are."""


class JobProcessFailed(RecruiterError):
    """A child process could not be started or did not follow the protocol."""

    recorded_as = "recruiter.pool.JobProcessFailed"
