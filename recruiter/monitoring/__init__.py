"""What operators read: jobs (:mod:`.listing`), analytics, metrics, traces and logs, and how
every view says a time, a count (:mod:`.words`) and database text (:mod:`.printable`)."""
