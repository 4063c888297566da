"""``recruiter run``, ``worker`` and ``clean``: parse, validate, connect, loop until signalled."""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from recruiter.cli.options import (
    DEMO_APP,
    App,
    DatabaseName,
    JsonLogs,
    Lease,
    LogLevel,
    MongoUri,
    WaitForDatabase,
    Watch,
    duration_option,
    load_registry,
    size_option,
    validated,
)
from recruiter.monitoring.logs import Level, setup_logging
from recruiter.processes.prefetch_rule import DEFAULT_PREFETCH

if TYPE_CHECKING:  # each command imports its process when it runs: --help stays fast
    from recruiter.loop import StopRequest

THREADS, ASYNCIO, ASYNCIO_CONCURRENCY = "threads", "asyncio", 100
"""The pools' names and asyncio's default slots (tests/test_cli.py holds them to the pools')."""

logger = logging.getLogger(__name__)


_STOPPED_CLEANLY = threading.Event()


def stopped_cleanly() -> None:
    """The work stopped cleanly: a signal now (a second Ctrl-C) ends the process with 0."""
    _STOPPED_CLEANLY.set()


def stop_on_signals(stop: threading.Event, name: str) -> None:
    """First SIGTERM/SIGINT: stop after the current work; a second: ``os._exit`` now (job
    threads would keep the process alive; the cleaner recovers what was left running).
    After :func:`stopped_cleanly`, a signal ends the process with status 0."""

    def handle(signum: int, frame: FrameType | None) -> None:
        if _STOPPED_CLEANLY.is_set():
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(0)
        if stop.is_set():
            logger.warning("%s: second signal, stopping now", name)
            sys.stderr.flush()
            os._exit(128 + signum)
        logger.info("%s: signal %d, stopping after the current work", name, signum)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def signalled_stop(name: str) -> StopRequest:
    """A stop request set by SIGTERM/SIGINT, installed first: a starting process stops cleanly."""
    from recruiter.loop import StopRequest

    stop = StopRequest()
    stop_on_signals(stop, name)
    return stop


LeaderApp = Annotated[
    str | None,
    typer.Option(
        "--app",
        "--bootstrap",
        help="A Registry (module:attribute) whose became-leader and stepped-down "
        "listeners to call; none by default.",
    ),
]
Prefetch = Annotated[
    int,
    typer.Option(
        help="Jobs one worker slot may be handed at once, when more are ready than "
        "slots are idle (1: no prefetch; see docs/guides/prefetch.md)."
    ),
]
PrefetchSeconds = Annotated[
    dt.timedelta,
    typer.Option(
        parser=duration_option,
        help="Expected work one worker slot may be handed at once (by each group's "
        "job length, as workers report it).",
    ),
]


def run(
    lease: Lease = "15s",  # type: ignore[assignment]
    app: LeaderApp = None,
    watch: Watch = True,
    prefetch: Prefetch = DEFAULT_PREFETCH,
    prefetch_seconds: PrefetchSeconds = "1s",  # type: ignore[assignment]
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
    wait_for_database: WaitForDatabase = "0s",  # type: ignore[assignment]
    log_level: LogLevel = Level.INFO,
    json_logs: JsonLogs = False,
) -> None:
    """The recruiter: hand ready jobs to available workers (one leads; others stand by)."""
    from recruiter.connection import open_store, resolve_uri
    from recruiter.processes.feed_cache import FeedInbox
    from recruiter.processes.leadership import Follow, Tell, lead
    from recruiter.processes.prefetch_rule import PrefetchRule
    from recruiter.processes.recruiter import Recruiter, RecruiterConfig
    from recruiter.queue import Queue

    setup_logging("recruiter", log_level, json_logs)
    stop = signalled_stop("recruiter")
    rule = PrefetchRule(prefetch, prefetch_seconds)
    config = validated(RecruiterConfig(lease=lease, watch=watch, prefetch=rule))
    registry = None if app is None else load_registry(app)
    store = open_store(resolve_uri(mongodb_uri)[0], database, wait=wait_for_database)
    news = FeedInbox() if config.watch else None
    follow = Follow(store.watch_for_work, config.followed_wait, news) if news else None
    recruiter = Recruiter(store, config, news)
    tell = None if registry is None else Tell(registry.listeners, Queue(store.database))
    lead(
        store,
        "recruiter",
        recruiter,
        lease=config.lease,
        backoff=config.idle_waits,
        stop=stop,
        follow=follow,
        tell=tell,
    )
    stopped_cleanly()


Group = Annotated[str, typer.Option(help="The group to work on; * for any.")]
Concurrency = Annotated[
    int | None,
    typer.Option(
        min=1,
        help=f"Jobs run at once (worker slots); default 1, {ASYNCIO_CONCURRENCY} "
        "with --pool asyncio.",
    ),
]
HeartbeatEvery = Annotated[
    dt.timedelta, typer.Option(parser=duration_option, help="Heartbeat interval.")
]
MemoryLimit = Annotated[
    int | None,
    typer.Option(parser=size_option, help="Retire after the job that crosses this (e.g. 512MB)."),
]
Pool = Annotated[
    str,
    typer.Option(
        help="Where jobs' code runs: threads (in this process), processes (a child "
        "process per slot, which a job cannot starve and a timeout can kill) or asyncio "
        "(async def jobs as tasks on one event loop: give it --concurrency 100 or more)."
    ),
]
MaxJobsPerChild = Annotated[
    int | None, typer.Option(min=1, help="Replace a slot's job process after this many jobs.")
]
JobMemoryLimit = Annotated[
    int | None,
    typer.Option(
        parser=size_option,
        help="Replace a slot's job process after a job that leaves it past this "
        "(e.g. 512MB); with --pool processes.",
    ),
]

WorkerDeadAfter = Annotated[
    dt.timedelta | None,
    typer.Option(
        "--considered-dead-after",
        parser=duration_option,
        help="How long this worker may go unheard before a cleaner may declare it dead "
        "and take its jobs back (recorded in the roster; a cleaner waits at least as "
        "long). Default 30s, or 5 heartbeats if longer.",
    ),
]
FenceMargin = Annotated[
    dt.timedelta | None,
    typer.Option(
        parser=duration_option,
        help="How long before --considered-dead-after the worker, unheard, stops its "
        "jobs' code and starts none until a heartbeat lands. Default: one heartbeat.",
    ),
]


def worker(
    app_spec: App = DEMO_APP,
    group: Group = "*",
    concurrency: Concurrency = None,
    heartbeat_every: HeartbeatEvery = "2s",  # type: ignore[assignment]
    memory_limit: MemoryLimit = None,
    watch: Watch = True,
    pool: Pool = THREADS,
    max_jobs_per_child: MaxJobsPerChild = None,
    job_memory_limit: JobMemoryLimit = None,
    considered_dead_after: WorkerDeadAfter = None,
    fence_margin: FenceMargin = None,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
    wait_for_database: WaitForDatabase = "0s",  # type: ignore[assignment]
    log_level: LogLevel = Level.INFO,
    json_logs: JsonLogs = False,
) -> None:
    """A worker: register in the roster, run what is assigned, heartbeat throughout."""
    from recruiter.connection import open_store, resolve_uri
    from recruiter.processes.worker import WorkerConfig, WorkerProcess

    setup_logging("worker", log_level, json_logs)
    stop = signalled_stop("worker")
    registry = load_registry(app_spec)
    config = validated(
        WorkerConfig(
            group=group,
            concurrency=concurrency or (ASYNCIO_CONCURRENCY if pool == ASYNCIO else 1),
            heartbeat_every=heartbeat_every,
            memory_limit=memory_limit,
            watch=watch,
            pool=pool,
            app=app_spec,
            max_jobs_per_child=max_jobs_per_child,
            job_memory_limit=job_memory_limit,
            considered_dead_after=considered_dead_after,
            fence_margin=fence_margin,
        )
    )
    store = open_store(resolve_uri(mongodb_uri)[0], database, wait=wait_for_database)
    process = WorkerProcess(store, registry, store.clock(), config, stop=stop)
    process.run()
    stopped_cleanly()
    logger.info("worker: stopped")


def clean(
    considered_dead_after: Annotated[
        dt.timedelta,
        typer.Option(
            parser=duration_option,
            help="A worker not seen for this long is dead (one whose own "
            "--considered-dead-after is longer is given that).",
        ),
    ] = "30s",  # type: ignore[assignment]
    clean_after: Annotated[
        dt.timedelta,
        typer.Option(parser=duration_option, help="Purge archived jobs finished this long ago."),
    ] = "5d",  # type: ignore[assignment]
    lease: Lease = "15s",  # type: ignore[assignment]
    app: Annotated[
        str | None,
        typer.Option(
            "--app",
            "--bootstrap",
            help="A Registry (module:attribute) to load: its module may set up tracing "
            "(the cleaner's rounds are spans), and its became-leader, stepped-down and "
            "job.expired listeners are called; none by default.",
        ),
    ] = None,
    mongodb_uri: MongoUri = None,
    database: DatabaseName = None,
    wait_for_database: WaitForDatabase = "0s",  # type: ignore[assignment]
    log_level: LogLevel = Level.INFO,
    json_logs: JsonLogs = False,
) -> None:
    """The cleaner: release the jobs of dead workers, purge old archived jobs."""
    from recruiter.connection import open_store, resolve_uri
    from recruiter.processes.cleaner import Cleaner, CleanerConfig
    from recruiter.processes.leadership import Tell, lead
    from recruiter.queue import Queue

    setup_logging("cleaner", log_level, json_logs)
    stop = signalled_stop("cleaner")
    config = validated(CleanerConfig(considered_dead_after, clean_after, lease))
    registry = None if app is None else load_registry(app)
    store = open_store(resolve_uri(mongodb_uri)[0], database, wait=wait_for_database)
    tell = None if registry is None else Tell(registry.listeners, Queue(store.database))
    cleaner = Cleaner(store, config, None if registry is None else registry.listeners)
    lead(
        store,
        "cleaner",
        cleaner,
        lease=config.lease,
        backoff=config.idle_waits,
        stop=stop,
        tell=tell,
    )
    stopped_cleanly()
