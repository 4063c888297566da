"""The long-running processes and what they share: the recruiter (``recruiter run``:
:mod:`.recruiter`, its plan of a round in :mod:`.planning`, how many jobs a slot is
handed at once in :mod:`.prefetch_rule`), the workers (``recruiter worker``: :mod:`.worker`),
the cleaner (``recruiter clean``: :mod:`.cleaner`), the lease one of each leads under
and the loop a leader runs (:mod:`.leadership`), change feeds that wake them
(:mod:`.watcher`), and all of them at once on one machine (``recruiter up``:
:mod:`.supervisor`)."""
