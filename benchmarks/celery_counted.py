"""``python -m benchmarks.celery_counted <celery arguments>``: the ``celery`` command with
the pymongo command listener of :mod:`benchmarks.counted` installed before kombu makes
its client, so a Celery worker's commands are counted as recruiter's are.

Celery's worker takes SIGUSR1 for itself (it prints every thread's stack); the counts'
handler is put back once the worker is ready.
"""

from __future__ import annotations

import signal
import sys

from benchmarks import counted


def main() -> None:
    counted.install()
    dump = signal.getsignal(signal.SIGUSR1)
    from celery.__main__ import main as celery_main  # noqa: PLC0415 (after the listener)
    from celery.signals import worker_ready  # noqa: PLC0415

    def restore(**_: object) -> None:
        signal.signal(signal.SIGUSR1, dump)

    worker_ready.connect(restore, weak=False)
    sys.argv[0] = "celery"
    celery_main()


if __name__ == "__main__":
    main()
