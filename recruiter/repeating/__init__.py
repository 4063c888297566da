"""Repeatable jobs (:meth:`recruiter.Queue.repeat`): when one runs (:mod:`.timing`), and
the job a scheduler creates at each occurrence, in the leader's rounds (:mod:`.occurrences`)."""
