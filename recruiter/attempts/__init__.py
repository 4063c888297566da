"""An attempt's life, from its start to its one end: the decision (:mod:`.verdict`), the
job's code (:mod:`.calling`), the one end funnel (:mod:`.ending`), a worker's run of a
held job (:mod:`.executor`, :mod:`.transaction`, :mod:`.prefetch`, :mod:`.completer`),
the one take-back rule (:mod:`.takeback`) and manual runs (:mod:`.manual`); the module
map in docs/internals/architecture.md says what each holds.

Import the modules themselves (``from recruiter.attempts.executor import Executor``):
this ``__init__`` imports nothing, so that no module below it is loaded for another.
"""
