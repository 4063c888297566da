"""The leaders' maintenance services: one duty each, each a small class with
``run_once(now)`` returning its counts, each run by exactly one leading process.

- the recruiter's: :mod:`.repeatable_jobs` (create the due occurrences of schedulers)
  and :mod:`.unheld_locks` (release jobs locked but held by no worker);
- the cleaner's: :mod:`.dead_workers` (take back their jobs), :mod:`.archiver`,
  :mod:`.purger` and :mod:`.blocked_sweep` (settle blocked jobs whose dependencies
  ended unnoticed).
"""
