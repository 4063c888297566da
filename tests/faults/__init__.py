"""The fault-injection suite: real processes, seeded faults, and an oracle.

- :mod:`tests.faults.app`: the workables the workers run; each writes its executions to
  a ledger that no recruiter code touches;
- :mod:`tests.faults.scenario`: starts a real server, recruiters, cleaners and workers,
  schedules a seeded mix of jobs and injects seeded faults, logging each one;
- :mod:`tests.faults.oracle`: checks the final database, the ledger, the lease history
  and the fault log together, and counts what happened.

``python -m tests.faults --help`` runs a scenario by hand (the soak);
``tests/test_faults.py`` runs the short ones in CI. See ``docs/internals/reliability.md``.
"""
