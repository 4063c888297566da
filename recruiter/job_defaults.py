"""What ``@registry.workable(name, key=..., encrypted=True)`` gives each job built of
the workable (``.job(...)``, ``.as_job()``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recruiter.errors import InvalidJob

if TYPE_CHECKING:
    from recruiter.encryption import KeyRingHolder
    from recruiter.job import JobSpec


@dataclass(frozen=True)
class JobDefaults:
    """What ``@registry.workable(name, key=..., encrypted=...)`` gives each job built of
    the workable: its key, a function of its arguments; its arguments sealed with the
    registry's key ring (as it is when the job is built: the ring may be given after the
    workable is registered)."""

    registry: KeyRingHolder
    name: str
    encrypted: bool = False
    key: Callable[..., Any] | None = None

    def __call__(self, spec: JobSpec) -> JobSpec:
        if self.key is not None:
            try:
                key = self.key(**spec.parameters)
            except Exception as error:
                raise InvalidJob(
                    f"workable {self.name!r}: its key function failed on the job's "
                    f"arguments: {type(error).__name__}: {error}"
                ) from error
            spec = spec.keyed(key)
        if self.encrypted:
            spec = spec.encrypted(self.registry.key_ring_for(self.name))
        return spec
