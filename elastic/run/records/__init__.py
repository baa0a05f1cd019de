"""The run's records on disk and on the wire: the run directory and journal, the recorder that folds them into state and report, and the Prometheus metrics."""
