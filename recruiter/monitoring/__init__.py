"""What operators read: a job's state and pages of jobs (:mod:`.listing`), the queue's
analytics and Prometheus metrics, traces and logs, and how every view says a time, a
count (:mod:`.words`) and text from the database (:mod:`.printable`)."""
