"""Archiving, by the leading cleaner: moves finished jobs from ``scheduled`` to
``archived``, up to :data:`~recruiter.store.ARCHIVE_BATCH` a run in three commands (a
worker only marks its job finished; a move a crash cut short is completed by the next run).
"""

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
