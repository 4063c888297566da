"""The oracle: judges a fault scenario from the database, the ledger and the fault log.

Nothing here trusts what the recruiter says about itself alone: each job's history is
checked against the ledger its own code wrote, against its retry policy replayed
attempt by attempt, and against the faults the runner injected. See
``docs/internals/reliability.md`` for the invariants in plain words.

A bound in seconds (a job back in the queue, a thawed worker gone, two processes'
reckonings of the database's time) holds on an idle machine: each is scaled by the
slowness the runner measured around the moment judged (:mod:`tests.faults.slowness`).
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from recruiter import FailedAttempt, Failure, GiveUp, JobTimedOut, RetryAt, WorkerDied
from recruiter.job import HISTORY_LIMIT
from recruiter.policies import policy_from_document
from recruiter.pools.stopping import SelfFenced
from recruiter.processes.worker import DECLARED_DEAD_EXIT
from recruiter.repeating.occurrences import MISSED_GRACE
from recruiter.states import SUCCEEDED
from tests.faults.app import Planned
from tests.faults.ledger import Run
from tests.faults.scenario import (
    OUTAGE_STARTS,
    REPEATED,
    SLOW_CONCURRENCY,
    Fault,
    Record,
    faults_by_kind,
)
from tests.faults.slowness import Slowness

RESUME_GRACE = 1.0
"""Seconds a frozen worker's job may run on after SIGCONT before its worker notices it
was declared dead (and exits): one heartbeat round trip, generously (idle: times the
machine's slowness)."""
CLOCK_TOLERANCE = dt.timedelta(milliseconds=2)
"""Stored dates have millisecond precision."""
CLOCK_SKEW = dt.timedelta(milliseconds=100)
"""How far two processes' reckonings of the server's time may differ (each reads it now
and then, and runs on its monotonic clock in between; idle: times the slowness, since
the reading's round trip is its uncertainty)."""
TIMED_OUT = "recruiter.stopping.JobTimedOut"
SELF_FENCED = "recruiter.stopping.SelfFenced"
STOPPED = (TIMED_OUT, "recruiter.stopping.JobCancelled", SELF_FENCED)
"""Failures of attempts stopped from outside: the job's run ended early, effect or not."""
FAILURES = {
    "tests.faults.app.Planned": Planned,
    "recruiter.errors.WorkerDied": WorkerDied,
    TIMED_OUT: JobTimedOut,
    SELF_FENCED: SelfFenced,
}
UNHEARD_BEFORE = 10.0
"""Seconds before an attempt a freeze or an outage may have left its worker unheard:
its fence stays closed until a heartbeat lands again (idle: times the slowness)."""


@dataclass
class Report:
    """What a scenario did and whether every invariant held."""

    jobs: int
    seconds: float
    faults: Counter[str]
    violations: list[str] = field(default_factory=list)
    lost: int = 0
    crashed_attempts: int = 0
    unacknowledged_runs: Counter[str] = field(default_factory=Counter)
    """Runs of a job's code whose result did not count, by cause."""
    duplicated_effects: Counter[str] = field(default_factory=Counter)
    """Side effects done a second time, by the cause of the first one not counting."""
    recoveries: list[float] = field(default_factory=list)
    """Seconds from a worker's death (or freeze) to its running job back in the queue."""
    delayed_recoveries: list[float] = field(default_factory=list)
    """The same, when another fault (the cleaner or the database down) slowed it."""
    resumed_overlaps: list[float] = field(default_factory=list)
    """Seconds a thawed worker's job ran on while another worker ran the same job."""
    leaders: Counter[str] = field(default_factory=Counter)
    """Takeovers of each lease."""
    skipped: int = 0
    """Faults not injected: no target at the time (no running job, say)."""
    self_fenced: int = 0
    """Thawed workers that found they were declared dead mid-job and exited."""
    occurrences: int = 0
    """Jobs the scenario's repeatable job created."""
    timed_out_attempts: int = 0
    """Attempts stopped at their job's timeout."""
    cancelled: Counter[str] = field(default_factory=Counter)
    """Jobs the runner asked to cancel, by how they ended."""
    most_slow_at_once: int = 0
    batches: int = 0
    """Batches whose callbacks were judged."""
    transactional: int = 0
    """Jobs of ``faults.confirm`` whose committed effects were counted."""
    put_off: int = 0
    """Faults put off to the end of the plan: no target at their time."""
    repeat_gaps: list[dict[str, Any]] = field(default_factory=list)
    """Stretches in which no recruiter created the repeatable job's occurrences for over
    :data:`~recruiter.repeating.occurrences.MISSED_GRACE`, whose missed ones its rule skipped."""
    worst_slowness: float = 1.0
    """The machine's slowness over the run's slowest stretch (1: a CPU to each process)."""
    snoozes: int = 0
    """Runs that snoozed (``faults.snooze``), each checked against the ledger."""
    progress_kept: int = 0
    """Attempts whose record kept the progress their code reported, each checked."""

    @property
    def ok(self) -> bool:
        return not self.violations

    def figures(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "seconds": round(self.seconds, 1),
            "faults": dict(sorted(self.faults.items())),
            "faults_skipped": self.skipped,
            "lost": self.lost,
            "violations": len(self.violations),
            "crashed_attempts": self.crashed_attempts,
            "unacknowledged_runs": dict(self.unacknowledged_runs),
            "duplicated_effects": dict(self.duplicated_effects),
            "worst_recovery_s": round(max(self.recoveries, default=0.0), 2),
            "worst_delayed_recovery_s": round(max(self.delayed_recoveries, default=0.0), 2),
            "worst_resumed_overlap_s": round(max(self.resumed_overlaps, default=0.0), 3),
            "lease_takeovers": dict(self.leaders),
            "thawed_workers_exited": self.self_fenced,
            "repeated_occurrences": self.occurrences,
            "timed_out_attempts": self.timed_out_attempts,
            "cancelled": dict(self.cancelled),
            "most_slow_at_once": self.most_slow_at_once,
            "batches_called_back": self.batches,
            "transactional_jobs": self.transactional,
            "faults_put_off": self.put_off,
            "repeat_skipped_in_gaps": sum(gap["skipped"] for gap in self.repeat_gaps),
            "worst_slowness": round(self.worst_slowness, 2),
            "snoozes": self.snoozes,
            "progress_kept": self.progress_kept,
        }


def judge(record: Record) -> Report:
    report = Report(len(record.planned), record.seconds, faults_by_kind(record))
    report.skipped = sum(1 for fault in record.faults if fault.kind == "skipped")
    report.put_off = sum(1 for fault in record.faults if fault.kind == "put-off")
    timeline = Timeline(record.faults, Slowness(record.slowness))
    report.worst_slowness = timeline.slowness.worst()
    callbacks = {b[name] for b in record.batches for name in ("on_success", "on_complete")}
    _completion(record, report)
    runs = defaultdict(list)
    for run in record.runs:
        runs[run.job].append(run)
    for document in record.archived:
        job_id = str(document["_id"])
        kind = record.planned.get(job_id) or ("succeed" if _occurrence_at(document) else None)
        if kind is None:
            report.violations.append(f"job {job_id} archived but never scheduled")
            continue
        if (
            document.get("why") == "cancelled"
            and job_id not in record.cancelled
            and job_id not in callbacks  # (judged by _batches)
        ):
            report.violations.append(f"job {job_id} cancelled, but nobody asked for it")
        JobJudge(document, kind, runs.pop(job_id, []), timeline, record, report).judge()
    for job_id in runs:
        report.violations.append(f"the ledger has runs of job {job_id}, which is not archived")
    _leases(record, report)
    _recoveries(record, timeline, report)
    _exits(record, report)
    _repeats(record, report)
    _concurrency(record, report)
    _batches(record, report)
    _transactional_effects(record, report)
    ends = {str(d["_id"]): d.get("why") for d in record.archived}
    report.cancelled = Counter(str(ends.get(job_id)) for job_id in record.cancelled)
    return report


def _concurrency(record: Record, report: Report) -> None:
    """The group ``slow`` never ran more attempts at once than its limit, by its jobs'
    history (a crashed attempt ends when the cleaner released it)."""
    moments: list[tuple[dt.datetime, int]] = []
    for document in record.archived:
        if document.get("group") != "slow":
            continue
        for attempt in document.get("history") or []:
            started, ended = attempt.get("started_at"), attempt.get("ended_at")
            if isinstance(started, dt.datetime) and isinstance(ended, dt.datetime):
                moments += [(started, 1), (ended, -1)]
    running = 0
    for _, change in sorted(moments):  # at the same moment, an end before a start
        running += change
        report.most_slow_at_once = max(report.most_slow_at_once, running)
    if report.most_slow_at_once > SLOW_CONCURRENCY:
        report.violations.append(
            f"{report.most_slow_at_once} jobs of group slow ran at once, "
            f"above its limit of {SLOW_CONCURRENCY}"
        )


def _batches(record: Record, report: Report) -> None:
    """Each batch's callbacks: on_complete released once every job of the batch had
    ended; on_success too if every job ended done, else cancelled (never run); each
    told of its batch once; neither ran twice (the ledger, by :class:`JobJudge`), nor
    began before the last start of any job of the batch (by the ledger's one clock)."""
    archived = {str(d["_id"]): d for d in record.archived}
    slowness = Slowness(record.slowness)
    started = _starts_that_count(record)
    for batch in record.batches:
        members = [archived.get(job_id) for job_id in batch["jobs"]]
        if any(member is None for member in members):
            continue  # reported as lost
        all_done = all(m.get("why") in SUCCEEDED for m in members if m is not None)
        last_start = max((t for job_id in batch["jobs"] for t in started[job_id]), default=0.0)
        last_end = max(m["archived_at"] for m in members if m is not None)
        for name in ("on_success", "on_complete"):
            callback = archived.get(batch[name])
            if callback is None:
                continue  # reported as lost
            # (once released, a callback is a job like any: its policy judges its runs)
            why, noted = callback.get("why"), callback.get("dependencies") or []
            cancel = name == "on_success" and not all_done
            if (why == "cancelled") != cancel or len(noted) != 1:
                report.violations.append(
                    f"batch callback {name} {batch[name]} ended {why}, its batch noted "
                    f"{len(noted)} times; expected {'cancelled' if cancel else 'released'}, once"
                )
            if cancel and callback.get("attempts"):
                report.violations.append(f"{name} {batch[name]} ran, though cancelled")
            runs = started.get(batch[name], [])
            if runs and min(runs) < last_start:
                report.violations.append(
                    f"{name} {batch[name]} began before a job of its batch began its last run"
                )
            first = (callback.get("history") or [{}])[0].get("started_at")
            if isinstance(first, dt.datetime) and first + _skew(slowness, first) < last_end:
                report.violations.append(
                    f"{name} {batch[name]} started at {first}, before its batch's last end "
                    f"at {last_end}"
                )
        report.batches += 1


def _starts_that_count(record: Record) -> dict[str, list[float]]:
    """When each job's runs began, by the ledger: all but a thawed worker's run of a job
    released while it was frozen. Frozen after its attempt's start was recorded and
    before the job's code wrote its first line, it writes that line on thawing, after
    the job was taken back and may have ended (its batch's callbacks begun): a run that
    did not count (invariant 4 wants its cause; invariant 6 bounds it beside the job's
    other runs), which the order of a batch's events does not wait for."""
    counted = {
        (str(document["_id"]), entry.get("attempt"), str(entry.get("worker")))
        for document in record.archived
        for entry in document.get("history") or []
        if not entry.get("crashed")
    }
    timeline = Timeline(record.faults)
    started: dict[str, list[float]] = defaultdict(list)
    for run in record.runs:
        thawed = any(stop <= run.started for stop, _ in timeline.frozen(run.pid))
        if thawed and (run.job, run.attempt, run.worker) not in counted:
            continue
        started[run.job].append(run.started)
    return started


def _skew(slowness: Slowness, moment: dt.datetime) -> dt.timedelta:
    """:data:`CLOCK_SKEW`, scaled by the machine's slowness around ``moment``."""
    return CLOCK_SKEW * slowness.around(moment.timestamp())


def _transactional_effects(record: Record, report: Report) -> None:
    """A job of ``faults.confirm`` writes its effect in its transaction: once if it
    ended done, never otherwise, whatever was killed when."""
    effects = Counter(str(effect.get("job")) for effect in record.effects)
    for document in record.archived:
        if (document.get("workable") or {}).get("class") != "faults.confirm":
            continue
        report.transactional += 1
        job_id = str(document["_id"])
        expected = 1 if document.get("why") == "done" else 0
        if effects[job_id] != expected:
            report.violations.append(
                f"job {job_id} (faults.confirm) ended {document.get('why')} with "
                f"{effects[job_id]} effects committed, not {expected}"
            )


def _occurrence_at(document: Mapping[str, Any]) -> dt.datetime | None:
    scheduler = document.get("scheduler")
    if isinstance(scheduler, Mapping) and scheduler.get("urn") == REPEATED:
        at = scheduler.get("at")
        return at if isinstance(at, dt.datetime) else None
    return None


def _repeats(record: Record, report: Report) -> None:
    """The repeatable job: one job per occurrence, none twice, none off its schedule, and
    none missing from the first to the last but as its rule for missed ones allows."""
    first = record.repeat_first
    if first is None:
        return
    created = sorted(
        ((at, document) for document in record.archived if (at := _occurrence_at(document))),
        key=lambda pair: pair[0],
    )
    times = [at for at, _ in created]
    report.occurrences = len(times)
    if not times:
        report.violations.append("the repeatable job created no occurrence")
        return
    doubled = sorted({t for t in times if times.count(t) > 1})
    if doubled:
        report.violations.append(f"occurrences created twice: {doubled[:5]}")
    interval = dt.timedelta(seconds=record.scenario.repeat_every)
    expected = [first + n * interval for n in range(int((times[-1] - first) / interval) + 1)]
    missing = sorted(set(expected) - set(times))
    strays = sorted(set(times) - set(expected))
    if strays:
        report.violations.append(f"occurrences off the schedule: {strays[:5]}")
    if not missing:
        return
    if record.scenario.repeat_missed == "all":
        report.violations.append(f"{len(missing)} occurrences never created: {missing[:5]}")
        return
    _skipped_as_missed(record, report, missing, dict(created), interval)


def _skipped_as_missed(
    record: Record,
    report: Report,
    missing: list[dt.datetime],
    created: Mapping[dt.datetime, Mapping[str, Any]],
    interval: dt.timedelta,
) -> None:
    """Under the rule ``"latest"``, a pass that finds the first occurrence due more than
    :data:`MISSED_GRACE` ago skips it and every one after it but the latest due, which
    it creates. So each run of missing occurrences must end at one created more than the
    grace after the first of them was due (a stretch no recruiter filled: reported, not
    a violation), and the scheduler must have counted them all as skipped."""
    slowness = Slowness(record.slowness)
    runs: list[list[dt.datetime]] = []
    for at in missing:
        if runs and at - runs[-1][-1] == interval:
            runs[-1].append(at)
        else:
            runs.append([at])
    for gap in runs:
        following = created.get(gap[-1] + interval, {})
        made = following.get("created_at")
        if (
            not isinstance(made, dt.datetime)
            or made + _skew(slowness, made) <= gap[0] + MISSED_GRACE
        ):
            report.violations.append(
                f"{len(gap)} occurrences never created from {gap[0]}: the next was created "
                f"at {made}, within the {MISSED_GRACE} the rule 'latest' waits before it skips"
            )
            continue
        late = (made - gap[0]).total_seconds()
        report.repeat_gaps.append({"from": gap[0].isoformat(), "skipped": len(gap), "s": late})
    counted = record.repeat_skipped
    if counted is not None and counted < len(missing):
        report.violations.append(
            f"{len(missing)} occurrences missing, but its scheduler counted {counted} skipped"
        )


def _completion(record: Record, report: Report) -> None:
    if not record.finished:
        report.violations.append(
            f"the run did not settle in {record.scenario.give_up_after}s (see faults.jsonl)"
        )
    archived = {str(d["_id"]) for d in record.archived}
    lost = set(record.planned) - archived
    report.lost = len(lost)
    if lost:
        report.violations.append(f"{len(lost)} jobs never archived: {sorted(lost)[:5]}")
    for document in record.scheduled:
        report.violations.append(
            f"job {document['_id']} still in scheduled (locked: {document.get('locked')})"
        )
    for worker in record.roster:
        report.violations.append(f"worker {worker['_id']} (pid {worker.get('pid')}) left on roster")


class Timeline:
    """The faults of a run, by process, and how slow the machine was when."""

    def __init__(self, faults: Iterable[Fault], slowness: Slowness | None = None) -> None:
        self.slowness = slowness or Slowness([])
        self.faults = list(faults)
        self.by_pid: dict[int, list[Fault]] = defaultdict(list)
        for fault in self.faults:
            if fault.pid is not None:
                self.by_pid[fault.pid].append(fault)

    def death(self, pid: int) -> float | None:
        """When the process was killed, or exited on its own."""
        return next(
            (f.t for f in self.by_pid[pid] if f.kind.startswith("kill-") or f.kind == "exited"),
            None,
        )

    def frozen(self, pid: int) -> list[tuple[float, float]]:
        """The intervals the process spent stopped."""
        return _intervals(self.by_pid[pid], ("freeze-worker",), "thaw-worker")

    def outages(self) -> list[tuple[float, float]]:
        """The intervals the database was down."""
        return _intervals(self.faults, OUTAGE_STARTS, "database-up")

    def unheard(self, pid: int, began: float, ended: float) -> bool:
        """Whether the worker ``pid`` may have gone unheard long enough to fence itself
        during a run from ``began`` to ``ended``: frozen, or the database down, then or
        a little before."""
        since = began - UNHEARD_BEFORE * self.slowness.around(began)
        overlaps = [
            (a, b) for a, b in self.frozen(pid) + self.outages() if a <= ended and b >= since
        ]
        return bool(overlaps)

    def cause(self, pid: int, run: Run | None = None, since: float = 0.0) -> str | None:
        """What we did to the process after ``since`` that stopped ``run`` counting."""
        for fault in self.by_pid[pid]:
            if fault.t < since:
                continue
            if fault.kind.startswith("kill-worker"):
                return "worker killed"
            if fault.kind == "freeze-worker":
                if run is not None and run.effect and run.ended and run.ended > fault.t:
                    return "worker frozen past the dead timeout, resumed its released job"
                return "worker frozen past the dead timeout"
        return None


def _intervals(
    faults: Iterable[Fault], starts: tuple[str, ...], end: str
) -> list[tuple[float, float]]:
    """From each fault of a kind in ``starts`` to the next of kind ``end`` (open-ended
    when none came)."""
    found: list[tuple[float, float]] = []
    start: float | None = None
    for fault in faults:
        if fault.kind in starts:
            start = fault.t
        elif fault.kind == end and start is not None:
            found.append((start, fault.t))
            start = None
    if start is not None:
        found.append((start, float("inf")))
    return found


class JobJudge:
    """Checks one archived job against its policy, its kind and the ledger."""

    def __init__(
        self,
        document: Mapping[str, Any],
        kind: str,
        runs: list[Run],
        timeline: Timeline,
        record: Record,
        report: Report,
    ) -> None:
        self.document = document
        self.id = str(document["_id"])
        self.kind = kind
        self.runs = runs
        self.timeline = timeline
        self.record = record
        self.report = report
        self.history: list[dict[str, Any]] = _numbered(document.get("history") or [])

    def fail(self, message: str) -> None:
        self.report.violations.append(f"job {self.id} ({self.kind}): {message}")

    def judge(self) -> None:
        self.report.crashed_attempts += sum(1 for r in self.history if r.get("crashed"))
        self.report.snoozes += sum(1 for r in self.history if r.get("outcome") == "snoozed")
        self.report.timed_out_attempts += sum(
            1 for r in self.history if r.get("class") == TIMED_OUT
        )
        if not self._history_is_whole():
            return
        self._policy()
        self._kind()
        self._progress()
        self._ledger()
        self._overlaps()

    def _history_is_whole(self) -> bool:
        """Every attempt recorded, in order; a snoozed run's attempt is run again (its
        number comes again), and the job's ``snoozes`` counts them."""
        attempts = self.document.get("attempts")
        numbers = [r.get("attempt") for r in self.history]
        if attempts is None or attempts + self.document.get("snoozes", 0) > HISTORY_LIMIT:
            self.fail(f"attempts {attempts!r} cannot be checked")
            return False
        snoozed = sum(1 for r in self.history if r.get("outcome") == "snoozed")
        expected = list(range(1, attempts + 1 + snoozed))
        if [r["attempt"] + r["snoozes_before"] for r in self.history] != expected:
            self.fail(f"attempts {attempts} but history records attempts {numbers}")
            return False
        if snoozed != self.document.get("snoozes", 0):
            self.fail(f"{snoozed} snoozes recorded, the job counts {self.document.get('snoozes')}")
            return False
        return True

    def _policy(self) -> None:
        """Replay the retry policy on each recorded failure: same verdicts, same times."""
        policy = policy_from_document(self.document.get("retry_policy"))
        created_at = self.document["created_at"]
        why = self.document.get("why")
        for index, entry in enumerate(self.history):
            last = index == len(self.history) - 1
            if last and why == "cancelled":
                continue  # cancelled: the policy has no say in how the job ended
            outcome = entry.get("outcome")
            if outcome == "snoozed":  # not the policy's: due again as the snooze said
                self._snoozed(index, why)
                continue
            if outcome == "done":
                if not last or why != "done" or entry.get("crashed"):
                    self.fail(f"attempt {entry['attempt']} done, yet the job went on ({why})")
                continue
            decision = policy.decide(_failed_attempt(self.id, created_at, entry), entry["ended_at"])
            if isinstance(decision, RetryAt):
                if last or outcome != "retry":
                    self.fail(f"attempt {entry['attempt']} {outcome}: its policy says retry")
                    continue
                expected, actual = decision.at, self.history[index + 1]["scheduled_at"]
                if abs(actual - expected) > CLOCK_TOLERANCE:
                    self.fail(f"attempt {entry['attempt'] + 1} due {expected}, ran as due {actual}")
            elif not last or outcome != "archived" or why != GiveUp(decision.why).why:
                self.fail(
                    f"attempt {entry['attempt']} {outcome}, job {why}: policy says {decision}"
                )

    def _progress(self) -> None:
        """Each attempt's record keeps its code's last report: the whole count when its
        code ran to its end, a part of it when it was stopped or died. A record's report
        is never another attempt's (a job's live progress goes with its lock)."""
        steps = self.document.get("workable", {}).get("parameters", {}).get("milliseconds", 0)
        for entry in self.history:
            progress = entry.get("progress")
            if progress is None:
                continue
            self.report.progress_kept += 1
            done, total = progress.get("done"), progress.get("total")
            if total != steps // 10 or not 1 <= done <= total:
                self.fail(f"attempt {entry['attempt']} kept progress {progress}, of {steps} ms")
            elif entry.get("outcome") == "done" and done != total:
                self.fail(f"attempt {entry['attempt']} done, its progress kept at {done}/{total}")

    def _snoozed(self, index: int, why: Any) -> None:
        """The snoozed run at ``index`` was followed by a run due when it said."""
        entry = self.history[index]
        if index == len(self.history) - 1:
            self.fail(f"attempt {entry['attempt']} snoozed, yet the job ended ({why})")
        elif abs(self.history[index + 1]["scheduled_at"] - entry["snoozed_until"]) > (
            CLOCK_TOLERANCE
        ):
            self.fail(f"attempt {entry['attempt']} snoozed, ran again at another time")

    def _kind(self) -> None:
        fail_times = self.document.get("workable", {}).get("parameters", {}).get("fail_times", 0)
        snooze_times = (
            self.document.get("workable", {}).get("parameters", {}).get("snooze_times", 0)
        )
        for entry in self.history:
            if entry.get("crashed") or entry.get("outcome") == "skipped":
                continue
            if entry.get("outcome") == "archived" and "class" not in entry:
                continue  # its snooze refused: cancelled while it ran
            if (entry.get("outcome") == "snoozed") != (
                self.kind == "snooze" and entry["snoozes_before"] < snooze_times
            ):
                self.fail(f"attempt {entry['attempt']} {entry.get('outcome')}, not as planned")
                continue
            if entry.get("outcome") == "snoozed":
                continue
            if self._stopped_from_outside(entry):
                continue
            raised = entry.get("outcome") != "done"
            should_raise = self.kind == "broken" or (
                self.kind == "flaky" and entry["attempt"] <= fail_times
            )
            if raised != should_raise:
                self.fail(f"attempt {entry['attempt']} {entry.get('outcome')}, not as planned")

    def _stopped_from_outside(self, entry: Mapping[str, Any]) -> bool:
        """Whether the attempt was stopped from outside (each checked to have been
        stopped as it may), rather than ended by its code."""
        stopped = entry.get("class")
        if stopped == SELF_FENCED and not self._unheard(entry):
            self.fail(
                f"attempt {entry['attempt']} stopped by its worker's fence, though the "
                "worker was neither frozen nor cut off from the database"
            )
        # a frozen worker's watchdog wakes past any deadline: a job with a timeout may
        # be stopped whatever its planned duration
        if stopped == TIMED_OUT and not self.document.get("timeout_ms"):
            self.fail(f"attempt {entry['attempt']} timed out, with no timeout")
        return stopped in STOPPED

    def _unheard(self, entry: Mapping[str, Any]) -> bool:
        began, ended = entry.get("started_at"), entry.get("ended_at")
        if not isinstance(began, dt.datetime) or not isinstance(ended, dt.datetime):
            return False
        return self.timeline.unheard(entry.get("pid") or 0, began.timestamp(), ended.timestamp())

    def _ledger(self) -> None:
        """Every counted attempt ran, and every run that did not count has a cause."""
        counted = {
            (r["attempt"], r["snoozes_before"], str(r.get("worker"))): r
            for r in self.history
            if not r.get("crashed")
        }
        attempts = Counter((run.attempt, run.snoozes) for run in self.runs)
        for (attempt, snoozes), times in attempts.items():
            if times > 1:
                self.fail(f"attempt {attempt} (after {snoozes} snoozes) ran {times} times")
        self._counted_attempts_ran(counted)
        self._uncounted_runs_have_a_cause(counted)
        if self.document.get("why") == "done" and not any(run.effect for run in self.runs):
            self.fail("done, but its side effect never happened")

    def _counted_attempts_ran(
        self, counted: Mapping[tuple[int, int, str], Mapping[str, Any]]
    ) -> None:
        for key, entry in counted.items():
            run = next((r for r in self.runs if (r.attempt, r.snoozes, r.worker) == key), None)
            if self._may_not_have_run(key[0], entry, run):
                continue
            if run is None or not run.finished:
                self.fail(f"attempt {key[0]} recorded as {entry.get('outcome')}, never ran")
            elif entry.get("class") in STOPPED:
                # stopped from outside: before its effect, or just after it
                if run.effect and sum(r.effect for r in self.runs) > 1:
                    self.report.duplicated_effects["stopped after its effect"] += 1
            elif run.effect != (entry.get("outcome") == "done"):
                self.fail(f"attempt {key[0]} recorded as {entry.get('outcome')}, ran otherwise")

    def _may_not_have_run(self, attempt: int, entry: Mapping[str, Any], run: Run | None) -> bool:
        """Whether the attempt is one recorded as not run (checked: it did not), or one
        whose job process its worker's fence killed (its code begun or not)."""
        if entry.get("outcome") == "skipped":  # cancelled before it started
            if run is not None:
                self.fail(f"attempt {attempt} skipped, yet it ran")
            return True
        if entry.get("unrun"):  # stopped before its code began (an async job's task)
            if run is not None:
                self.fail(f"attempt {attempt} recorded as not run, yet it ran")
            return True
        return entry.get("class") == SELF_FENCED and (run is None or not run.finished)

    def _uncounted_runs_have_a_cause(
        self, counted: Mapping[tuple[int, int, str], Mapping[str, Any]]
    ) -> None:
        for entry in self.history:
            if entry.get("crashed") and self.timeline.cause(entry.get("pid") or 0) is None:
                self.fail(
                    f"attempt {entry['attempt']} taken from a live worker (pid {entry.get('pid')})"
                )
        for run in self.runs:
            if (run.attempt, run.snoozes, run.worker) in counted:
                continue
            # the attempt began when its start was recorded, which may be before the
            # ledger's start line: a worker frozen between the two writes it on thawing
            recorded = next(
                (
                    r
                    for r in self.history
                    if (r["attempt"], r["snoozes_before"]) == (run.attempt, run.snoozes)
                ),
                {},
            )
            since = min(run.started, _timestamp(recorded.get("started_at"), run.started))
            cause = self.timeline.cause(run.pid, run, since)
            if cause is None:
                self.fail(f"attempt {run.attempt} ran on pid {run.pid} and did not count, no fault")
                continue
            self.report.unacknowledged_runs[cause] += 1
            if run.effect and sum(r.effect for r in self.runs) > 1:
                self.report.duplicated_effects[cause] += 1

    def _overlaps(self) -> None:
        """No two workers ran the job at once, except a thawed one for a moment."""
        segments = [(run, self._live(run)) for run in self.runs]
        for n, (first, first_live) in enumerate(segments):
            for second, second_live in segments[n + 1 :]:
                overlap = _intersection(first_live, second_live)
                if overlap <= 0:
                    continue
                thawed = any(self.timeline.frozen(r.pid) for r in (first, second))
                grace = RESUME_GRACE * self.timeline.slowness.around(second.started)
                if thawed and overlap <= grace:
                    self.report.resumed_overlaps.append(overlap)
                    continue
                self.fail(
                    f"attempts {first.attempt} (pid {first.pid}) and {second.attempt} "
                    f"(pid {second.pid}) ran at once for {overlap:.3f}s"
                )

    def _live(self, run: Run) -> list[tuple[float, float]]:
        """When ``run`` was actually running: from its start to its end or its process's
        death, minus the time its process was stopped."""
        end = run.ended or self.timeline.death(run.pid) or self.record.seconds + run.started
        segments = [(run.started, end)]
        for stop, cont in self.timeline.frozen(run.pid):
            segments = [
                piece
                for start, finish in segments
                for piece in ((start, min(finish, stop)), (max(start, cont), finish))
                if piece[1] > piece[0]
            ]
        return segments


def _numbered(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history, each record told how many times the job had snoozed before its run
    (``snoozes_before``): with its attempt number, what names a run in the ledger."""
    numbered, snoozed = [], 0
    for record in history:
        numbered.append({**record, "snoozes_before": snoozed})
        snoozed += record.get("outcome") == "snoozed"
    return numbered


def _failed_attempt(
    job_id: str, created_at: dt.datetime, entry: Mapping[str, Any]
) -> FailedAttempt:
    exception = FAILURES[entry["class"]](entry.get("message", ""))
    failure = Failure.from_exception(exception)
    if entry.get("crashed"):
        failure = Failure.worker_died(entry.get("message", ""))
    return FailedAttempt(
        job_id, entry["attempt"], created_at, failure, entry.get("started_at"), entry["ended_at"]
    )


def _timestamp(moment: Any, default: float) -> float:
    return moment.timestamp() if isinstance(moment, dt.datetime) else default


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


def _leases(record: Record, report: Report) -> None:
    """Each takeover of a lease came after the previous holder's lease expired."""
    for lease in record.leases:
        history = lease.get("history") or []
        report.leaders[lease["_id"]] = len(history)
        for previous, entry in itertools.pairwise(history):
            if entry.get("previous_holder") != previous["holder"]:
                report.violations.append(
                    f"{lease['_id']}: history skips a holder between {previous['holder']} "
                    f"and {entry['holder']}"
                )
            expired = entry.get("previous_expires_at")
            if expired is None or entry["acquired_at"] < expired:
                report.violations.append(
                    f"{lease['_id']}: {entry['holder']} took over at {entry['acquired_at']}, "
                    f"before {previous['holder']}'s lease expired ({expired})"
                )


def _recoveries(record: Record, timeline: Timeline, report: Report) -> None:
    """A dead (or frozen) worker's running job is released within twice the dead timeout
    (the second of them times the machine's slowness, with any allowance for an outage)."""
    scenario = record.scenario
    limit = 2 * scenario.dead_after
    crashed = [
        entry
        for document in record.archived
        for entry in document.get("history") or []
        if entry.get("crashed")
    ]
    for fault in timeline.faults:
        if fault.kind not in ("kill-worker-busy", "freeze-worker"):
            continue
        for entry in crashed:
            started = entry.get("started_at")
            if entry.get("pid") != fault.pid or started is None or started.timestamp() > fault.t:
                continue
            seconds = entry["ended_at"].timestamp() - fault.t
            disturbance = _disturbance(timeline, fault.t, limit, record, fault.t + seconds)
            # the dead timeout is a wait on the database's clock; what follows it (the
            # cleaner's rounds, its writes, a restart) is work a busy machine slows
            slowness = timeline.slowness.around(fault.t, fault.t + seconds)
            allowance = scenario.dead_after + (limit - scenario.dead_after + disturbance) * slowness
            if disturbance:
                report.delayed_recoveries.append(seconds)
            else:
                report.recoveries.append(seconds)
            if seconds > allowance:
                report.violations.append(
                    f"the job of pid {fault.pid} ({fault.kind} at {fault.t:.1f}) came back "
                    f"after {seconds:.1f}s, over {allowance:.1f}s"
                )


def _disturbance(timeline: Timeline, t: float, limit: float, record: Record, ended: float) -> float:
    """Extra seconds a recovery may take because the cleaner or the database was down.

    The faults are taken in time order, from a lease and a limit before the recovery's
    window on, each only while the recovery is still due (and before it happened): each
    makes it due again a ``limit`` after the fault's own cost (an outage, a dead timeout
    and a server selection for the database; a lease and a dead timeout for the
    cleaner), so a storm allows its length, not the sum of its faults' costs."""
    scenario = record.scenario
    due = t + limit
    for fault in sorted(timeline.faults, key=lambda f: f.t):
        if not t - scenario.lease - limit <= fault.t <= min(due, ended):
            continue
        if fault.kind == "kill-cleaner":
            cost = scenario.lease + scenario.dead_after
        elif fault.kind in OUTAGE_STARTS:
            outage = float(fault.note.rsplit("down for ", 1)[1].rstrip("s"))
            cost = outage + scenario.dead_after + 5.0
        else:
            continue
        due = max(due, fault.t + cost + limit)
    return due - (t + limit)


def _exits(record: Record, report: Report) -> None:
    """Every process we did not kill stopped cleanly at the end."""
    killed = {f.pid for f in record.faults if f.kind.startswith("kill-") or f.kind == "make-way"}
    exited = {f.pid for f in record.faults if f.kind == "exited"}
    frozen = {f.pid for f in record.faults if f.kind == "freeze-worker"}
    for pid, (role, code) in record.exits.items():
        if pid in exited or pid in killed or role == "half-round":
            continue
        if pid in frozen and code == DECLARED_DEAD_EXIT:
            report.self_fenced += 1  # thawed as the run ended: it stopped as it should
        elif code != 0:
            report.violations.append(f"{role} pid {pid} exited with {code} at the end")
    for fault in record.faults:
        if fault.kind != "exited":
            continue
        if fault.pid in frozen and fault.note == f"worker exited with code {DECLARED_DEAD_EXIT}":
            report.self_fenced += 1  # it found it was declared dead, as it should
        else:
            report.violations.append(f"pid {fault.pid}: {fault.note} during the run")
