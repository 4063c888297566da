"""Where a worker's slots run a job's code: threads (in :mod:`recruiter.processes.worker`),
a child process per slot (:mod:`.process_pool`), one asyncio event loop
(:mod:`.event_loop`); stopping a running job at its timeout or on cancellation
(:mod:`.stopping`), and the memory a process holds (:mod:`.memory`)."""
