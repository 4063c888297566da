"""What operators read (jobs, analytics, metrics, traces, logs), and how every view words it."""
