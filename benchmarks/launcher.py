"""What starting a shell-command job through its launcher costs: ``true``, run directly
and through the launcher that ties it to its worker's life (median of 30 runs each).

    python -m benchmarks.launcher
"""

from __future__ import annotations

import statistics
import subprocess
import time

from recruiter.command import _launched

RUNS = 30


def median_ms(argv: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        began = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append(time.perf_counter() - began)
    return 1000 * statistics.median(times)


def main() -> None:
    direct, launched = median_ms(["true"]), median_ms(_launched(["true"]))
    print(f"true, started directly:        {direct:.1f} ms")
    print(f"true, started by the launcher: {launched:.1f} ms (+{launched - direct:.1f} ms)")


if __name__ == "__main__":
    main()
