"""The long-running processes: the recruiter (``recruiter run``), the workers
(``recruiter worker``), the cleaner (``recruiter clean``), the lease the recruiter and
the cleaner lead under (:mod:`.leadership`), the change feeds that wake them
(:mod:`.watcher`), and all of them on one machine (``recruiter up``: :mod:`.supervisor`)."""
