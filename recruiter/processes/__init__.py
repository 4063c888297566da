"""The long-running processes: the recruiter, the workers, the cleaner, the lease the
leaders hold (:mod:`.leadership`), the change feeds that wake them (:mod:`.watcher`), and
all of them on one machine (``recruiter up``: :mod:`.supervisor`)."""
