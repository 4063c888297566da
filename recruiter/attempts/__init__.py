"""An attempt's life: from its start to its one end.

- :mod:`.verdict`: the pure decision of how an attempt ends its job (done, retry at a
  time, give up and why), and the one shape of an attempt's record;
- :mod:`.calling`: running the job's code where it runs, and what it gave;
- :mod:`.ending`: **the one funnel** every end of an attempt goes through: its record
  written with the store's one verb (``record_end``), then :func:`~.ending.ended`,
  which tells what waits for the job, the listeners and the hooks;
- :mod:`.executor`: a worker's (or a test's) run of one held job: start, skip, call,
  conclude; :mod:`.transaction`: a ``transaction=True`` job's code and end in one
  transaction; :mod:`.prefetch`: a slot's several handed-out jobs, each job's end
  carrying the next one's start;
- :mod:`.takeback`: the one rule for taking a job back from a holder that can no longer
  end it: a crashed attempt, ended through the same funnel.

Import the modules themselves (``from recruiter.attempts.executor import Executor``):
this package's ``__init__`` imports nothing, so that the events module may name an
attempt's :class:`~.verdict.Execution` without a circle.
"""
