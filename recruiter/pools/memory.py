"""How much memory this process holds: for a worker's memory limit, and a job process's."""

from __future__ import annotations

import os
import resource


def resident_memory() -> int:
    """Bytes of resident memory of this process now (peak where /proc is missing)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
