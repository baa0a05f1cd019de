"""Goodput under a failure schedule: the schedule, its mixes, the replayer, the runner (``bench_goodput.py``)."""
