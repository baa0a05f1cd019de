"""The spawner's warm-start schedule: how long its poll() may wait."""

from __future__ import annotations

import os
import select

from elastic.core.options.values import MAX_SECONDS
from elastic.node.spawner.prewarm_pool import PrewarmPool


def test_a_warm_start_due_in_the_longest_delay_still_fits_the_spawners_poll() -> None:
    """--prewarm-delay 1e9 (the longest seconds allowed) gives a poll() timeout that poll takes
    (at most 2**31-1 ms); the exact delay would overflow it and end the spawner."""
    pool = PrewarmPool(cgroup=None)
    pool.schedule(os.getpid(), ("key",), ["python"], {}, None,
                  {"prewarm_delay_s": MAX_SECONDS, "prewarm": ["json"], "launch_vars": []})

    timeout_ms = pool.poll_timeout_ms()

    assert timeout_ms is not None and 0 < timeout_ms < 2**31
    read_end, write_end = os.pipe()
    try:
        poller = select.poll()
        poller.register(write_end, select.POLLOUT)  # ready at once: poll checks the timeout, waits not
        assert [(write_end, select.POLLOUT)] == poller.poll(timeout_ms)
    finally:
        os.close(read_end)
        os.close(write_end)
