"""Repeatable jobs (:meth:`recruiter.Queue.repeat`): when one runs, a cron expression or
every so often (:mod:`.timing`: :class:`~.timing.Cron`, :class:`~.timing.Every`, what
to do with occurrences missed), and the job a stored scheduler creates at each
occurrence, run by the leading recruiter's rounds (:mod:`.occurrences`). The store's
verbs on the ``schedulers`` collection are :mod:`recruiter.store.schedulers`."""
