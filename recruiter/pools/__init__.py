"""Where a worker's slots run a job's code (threads, :mod:`.process_pool`, :mod:`.event_loop`),
and stopping it at its timeout or on cancellation (:mod:`.stopping`)."""
