"""Prometheus metrics, read from the database at each scrape (docs/guides/operations.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from recruiter.job import ANY_GROUP
from recruiter.monitoring import listing
from recruiter.monitoring.analytics import WINDOW, spans
from recruiter.queue import Queue
from recruiter.retry import FAILED, Why
from recruiter.states import UNFINISHED

LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0)


class QueueCollector(Collector):
    """The queue's metrics at each scrape, read as the views read them (:mod:`.listing`)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def collect(self) -> Iterator[Metric]:
        now = self.queue.clock.now()
        recent = listing.recently_finished_by_group(self.queue, WINDOW)
        workers = listing.worker_rows(self.queue)  # read once: known groups, and the slots
        states = tuple(state for state in UNFINISHED if state != "blocked")
        counted = listing.unfinished_counts(self.queue, now, states)
        limits = listing.group_limits(self.queue)
        jobs, groups = self._jobs(counted.by_state, recent, workers, limits)
        yield jobs
        yield self._finished(recent, groups)
        yield self._paused(limits, groups)
        yield self._keys(limits)
        yield self._latency(recent)
        yield self._execution(recent)
        yield self._workers(workers)
        yield from self._waiting(counted.waiting_for_a_workable)
        yield self._leaders()

    def _jobs(
        self,
        counts: Mapping[str, Mapping[str, int]],
        recent: Mapping[str, Any],
        workers: list[dict[str, Any]],
        limits: Mapping[str, listing.GroupLimits],
    ) -> tuple[Metric, list[str]]:
        family = GaugeMetricFamily(
            "recruiter_jobs", "Jobs by group and state.", labels=["group", "state"]
        )
        # every known group has every state, 0 too: a vanishing series reads as "no data"
        known = set(limits)
        known |= {w["group"] for w in workers if w["group"] != ANY_GROUP}
        groups = sorted({*known, *recent, *(g for c in counts.values() for g in c)})
        for group in groups:
            for state, by_group in counts.items():
                family.add_metric([group, state.replace(" ", "_")], by_group.get(group, 0))
        return family, groups

    def _paused(self, limits: Mapping[str, listing.GroupLimits], groups: list[str]) -> Metric:
        family = GaugeMetricFamily(
            "recruiter_group_paused",
            "When the group was paused, in seconds since the epoch; 0 while it is not.",
            labels=["group"],
        )
        for group in groups:
            paused_at = limits[group].paused_at if group in limits else None
            family.add_metric([group], 0 if paused_at is None else paused_at.timestamp())
        return family

    def _keys(self, limits: Mapping[str, listing.GroupLimits]) -> Metric:
        family = GaugeMetricFamily(
            "recruiter_group_keys_running",
            "Keys with a job handed out or running, of each group limited per key.",
            labels=["group"],
        )
        keyed = sorted(g for g, said in limits.items() if said.settings and said.settings.keyed)
        running = self.queue.store.running_keys(keyed)
        for group in keyed:
            family.add_metric([group], running.get(group, 0))
        return family

    def _finished(self, recent: Mapping[str, list[Mapping[str, Any]]], groups: list[str]) -> Metric:
        family = GaugeMetricFamily(
            "recruiter_jobs_finished",
            "Jobs finished in the last minute, by group and outcome.",
            labels=["group", "outcome"],
        )
        for group in groups:
            documents = recent.get(group, [])
            family.add_metric([group, "done"], sum(1 for d in documents if d.get("why") == "done"))
            family.add_metric(
                [group, "failed"], sum(1 for d in documents if d.get("why") in FAILED)
            )
            family.add_metric(
                [group, "expired"], sum(1 for d in documents if d.get("why") == Why.EXPIRED)
            )
        return family

    def _latency(self, recent: Mapping[str, list[Mapping[str, Any]]]) -> Metric:
        family = GaugeHistogramMetricFamily(
            "recruiter_latency_seconds",
            "Seconds from due to started, over the last minute's jobs.",
            labels=["group"],
        )
        for group, documents in recent.items():
            latencies = spans(documents, "scheduled_at", "started_at")
            buckets = [
                (str(bound), sum(1 for s in latencies if s <= bound)) for bound in LATENCY_BUCKETS
            ]
            buckets.append(("+Inf", len(latencies)))
            family.add_metric([group], buckets, sum(latencies))
        return family

    def _execution(self, recent: Mapping[str, list[Mapping[str, Any]]]) -> Metric:
        family = GaugeMetricFamily(
            "recruiter_execution_seconds",
            "Average seconds from started to ended, over the last minute's jobs.",
            labels=["group"],
        )
        for group, documents in recent.items():
            durations = spans(documents, "started_at", "ended_at")
            if durations:
                family.add_metric([group], sum(durations) / len(durations))
        return family

    def _workers(self, workers: list[dict[str, Any]]) -> Metric:
        family = GaugeMetricFamily(
            "recruiter_workers", "Worker slots on the roster.", labels=["state"]
        )
        busy = sum(1 for worker in workers if worker["busy"])
        family.add_metric(["busy"], busy)
        family.add_metric(["idle"], len(workers) - busy)
        return family

    def _waiting(self, waiting: list[dict[str, Any]]) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "recruiter_waiting_jobs",
            "Ready jobs of a workable that no worker on the roster can run.",
            labels=["workable"],
        )
        seconds = GaugeMetricFamily(
            "recruiter_waiting_seconds",
            "How long the oldest ready job of a workable no worker can run has waited.",
            labels=["workable"],
        )
        for entry in waiting:
            jobs.add_metric([entry["workable"]], entry["jobs"])
            seconds.add_metric([entry["workable"]], entry["waited_s"])
        yield jobs
        yield seconds

    def _leaders(self) -> Metric:
        family = GaugeMetricFamily(
            "recruiter_leader",
            "1 for the process that holds each lease.",
            labels=["process", "holder"],
        )
        for process, lease in listing.leases(self.queue, self.queue.clock.now()).items():
            if lease["holder"] is not None:
                family.add_metric([process, lease["holder"]], 1)
        return family
