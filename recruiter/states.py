"""The words for where a job stands, the same in every view and every filter.

A job not finished is ``ready`` (due, waiting for a worker), ``postponed`` (due later),
``blocked`` (waiting for other jobs), ``handed out`` (not started yet) or ``running``; a
finished one is ``done``, ``failed``, ``cancelled`` or ``expired`` (``finished``: any). Light on
purpose: the commands' help reads it.
"""

from __future__ import annotations

UNFINISHED = ("ready", "postponed", "blocked", "handed out", "running")
"""The states of a job that has not finished, as :func:`recruiter.job_record.state_of` says them."""
FINISHED = ("done", "failed", "cancelled", "expired", "finished")
"""The states jobs that finished are listed by (``finished``: however they ended)."""
STATES = (*UNFINISHED, *FINISHED)
"""Every state jobs can be listed by."""
SUCCEEDED = ("done", "duplicate", "superseded")
"""How a job may end and count as done for what waits for it: it ran, or another did its work."""
