"""The benchmark harness: recruiter, a naive MongoDB queue and RQ, side by side.

``python -m benchmarks --help`` (or ``bin/bench``) runs it; ``docs/guides/performance.md``
explains what it measures and records the figures. Nothing here is timed in a test.
"""
