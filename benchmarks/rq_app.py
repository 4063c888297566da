"""The no-op job for RQ, which imports jobs by dotted path: in a module of its own that
imports nothing, so that RQ's forking worker, whose work-horse imports the job's module
for every job, pays for RQ and not for recruiter's imports."""


def rq_noop() -> None:
    """Does nothing: what is measured is the queue."""
