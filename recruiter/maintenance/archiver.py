"""Archiving, by the leading cleaner: moves finished jobs (a worker only marks them) from
``scheduled`` to ``archived``, up to :data:`~recruiter.store.ARCHIVE_BATCH` a run in three
commands; the next run completes a move a crash cut short."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from recruiter.store import Store


@dataclass(frozen=True)
class ArchiveResult:
    moved: int = 0


class Archiver:
    def __init__(self, store: Store) -> None:
        self.store = store

    def run_once(self, now: dt.datetime) -> ArchiveResult:
        return ArchiveResult(self.store.archive_finished())
