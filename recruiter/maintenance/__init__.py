"""The leaders' maintenance services: one duty each, each a small class with
``run_once(now)`` returning its counts, each run by exactly one leading process.

- :mod:`.repeatable_jobs`: create the due occurrences of schedulers (the recruiter);
- :mod:`.unheld_locks`: release jobs locked but held by no worker (the recruiter);
- :mod:`.dead_workers`: take back the jobs of dead workers (the cleaner);
- :mod:`.archiver`: move finished jobs to ``archived`` (the cleaner);
- :mod:`.purger`: delete archived jobs past their keep time (the cleaner);
- :mod:`.blocked_sweep`: settle blocked jobs whose dependencies ended unnoticed (the cleaner).

The hand-out round itself is the recruiter's (:mod:`recruiter.processes.recruiter`).
"""
