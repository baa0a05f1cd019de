"""Heartbeats: the staleness maths on numbers, the beacon's rate limit on a fake clock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from elastic.cli.entry import main
from elastic.core.failures import FailureKind, WorkerExit, classify, to_failure
from elastic.worker.heartbeat import (
    BEAT_INTERVAL_S,
    DEFAULT_STARTUP_TIMEOUT_S,
    HEARTBEAT_FILE_VAR,
    Beacon,
    HangPolicy,
    HeartbeatSource,
    beat_deadline,
    check_interval_s,
    is_stale,
    observed_beat_at,
)
from elastic.testing import FakeClock
from elastic.node.watchers.hangs import BeatTracker, hang_reason, signature

# -- the deadline maths ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("started_at", "last_beat_at", "timeout_s", "startup_s", "expected"),
    [
        (100.0, None, 10.0, 300.0, 400.0),  # no beat yet: the startup allowance
        (100.0, 150.0, 10.0, 300.0, 160.0),  # after a beat: the heartbeat timeout
        (100.0, 101.0, 10.0, 300.0, 111.0),  # a first beat ends the startup allowance
        (100.0, None, 600.0, 5.0, 105.0),  # a short startup timeout is honoured
    ],
)
def test_beat_deadline(
    started_at: float, last_beat_at: float | None, timeout_s: float, startup_s: float, expected: float
) -> None:
    """The deadline is timeout after the last beat, or the startup allowance before any."""
    assert expected == beat_deadline(started_at, last_beat_at, timeout_s, startup_s)


def test_is_stale_on_a_fake_clock() -> None:
    """A rank is stale from its deadline on, not a moment before; a beat pushes it back."""
    clock = FakeClock(start=0.0)
    tracker = BeatTracker(baseline=None, watched_from=0.0)
    policy = HangPolicy(timeout_s=10.0, startup_timeout_s=30.0)

    clock.advance(29.9)
    assert not tracker.stale(clock.monotonic(), 0.0, policy)
    clock.advance(0.1)
    assert tracker.stale(clock.monotonic(), 0.0, policy)

    assert tracker.saw(clock.monotonic(), (10, 1, 1, b"a"), age_s=0.0)
    clock.advance(10.0 + BEAT_INTERVAL_S - 0.1)
    assert not tracker.stale(clock.monotonic(), 0.0, policy)
    assert not tracker.saw(clock.monotonic(), (10, 1, 1, b"a"), age_s=9.9)  # unchanged: no beat
    clock.advance(0.1)
    assert tracker.stale(clock.monotonic(), 0.0, policy)
    assert is_stale(clock.monotonic(), 0.0, tracker.last_beat_at, policy.silence_allowed_s, 30.0)


def test_calls_between_two_writes_are_allowed_for(tmp_path: Path) -> None:
    """A rank whose last heartbeat() call fell between two writes is not hung until the
    timeout has passed since that call, though the call left no trace in the file."""
    clock = FakeClock(start=0.0)
    beacon = Beacon(str(tmp_path / "beat"), clock=clock.monotonic)
    policy = HangPolicy(timeout_s=10.0, startup_timeout_s=30.0)
    tracker = BeatTracker(baseline=None, watched_from=0.0)

    beacon.beat(step=1)
    seen = signature(str(tmp_path / "beat"), heartbeat_file=True)
    assert seen is not None
    assert tracker.saw(clock.monotonic(), seen[0], age_s=0.0)
    clock.advance(BEAT_INTERVAL_S - 0.01)
    beacon.beat(step=2)  # the rank's last call, then it hangs
    assert 1 == beacon.writes
    last_call_at = clock.monotonic()

    clock.advance(10.0 - 0.001)  # just short of the timeout since the last call
    assert not tracker.stale(clock.monotonic(), 0.0, policy)
    clock.advance(0.011)  # the timeout since the last possible unwritten call
    assert clock.monotonic() - last_call_at == pytest.approx(10.0 + 0.01)
    assert tracker.stale(clock.monotonic(), 0.0, policy)


def test_output_lines_are_seen_one_by_one_so_need_no_allowance() -> None:
    """With --heartbeat-source output every line is a beat: the timeout applies as given."""
    assert 10.0 == HangPolicy(timeout_s=10.0, source=HeartbeatSource.OUTPUT).silence_allowed_s
    assert 10.0 + BEAT_INTERVAL_S == HangPolicy(timeout_s=10.0).silence_allowed_s


def test_what_was_there_before_the_rank_started_is_no_beat() -> None:
    """A file that existed before the start, or an empty one, is not a first beat."""
    tracker = BeatTracker(baseline=(5, 7, 1, b"old"), watched_from=0.0)
    assert not tracker.saw(1.0, (5, 7, 1, b"old"), age_s=50.0)
    assert not tracker.saw(2.0, None, age_s=0.0)
    assert tracker.last_beat_at is None
    assert tracker.saw(3.0, (5, 8, 1, b"new"), age_s=0.25)
    assert 2.75 == tracker.last_beat_at


@pytest.mark.parametrize(
    ("now", "age_s", "previous_check_at", "expected"),
    [
        (10.0, 0.3, 9.5, 9.7),  # an honest mtime: exact
        (10.0, 100.0, 9.5, 9.5),  # a clock far behind: not before the previous look
        (10.0, -5.0, 9.5, 10.0),  # a clock ahead: not in the future
    ],
)
def test_observed_beat_at_is_clamped_between_the_looks(
    now: float, age_s: float, previous_check_at: float, expected: float
) -> None:
    """A beat seen now happened after the previous look and not later than now."""
    assert expected == pytest.approx(observed_beat_at(now, age_s, previous_check_at))


def test_check_interval_is_a_quarter_of_the_shorter_timeout_at_most_half_a_second() -> None:
    """The watcher looks every min(0.5 s, timeout / 4)."""
    assert 0.5 == check_interval_s(HangPolicy(600.0))
    assert 0.5 == check_interval_s(HangPolicy(2.0))
    assert 0.25 == check_interval_s(HangPolicy(60.0, startup_timeout_s=1.0))


def test_startup_timeout_defaults_to_300_s_or_the_heartbeat_timeout_if_longer() -> None:
    """Without --startup-timeout a rank gets 300 s, or the heartbeat timeout when longer."""
    assert DEFAULT_STARTUP_TIMEOUT_S == HangPolicy(2.0).startup_s
    assert 900.0 == HangPolicy(900.0).startup_s
    assert 5.0 == HangPolicy(900.0, startup_timeout_s=5.0).startup_s


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_hang_policy_rejects_timeouts_that_are_not_positive(bad: float) -> None:
    """A zero, negative or infinite timeout is refused."""
    with pytest.raises(ValueError, match="timeout_s"):
        HangPolicy(bad)
    with pytest.raises(ValueError, match="startup_timeout_s"):
        HangPolicy(1.0, startup_timeout_s=bad)


def test_hang_reason_names_the_flag_that_decided() -> None:
    """The failure message says how long the rank was silent and which limit it passed."""
    assert "no heartbeat for 12.5s (--heartbeat-timeout 10s)" == hang_reason(
        112.5, 100.0, HangPolicy(10.0)
    )
    assert "no output for 3.0s (--heartbeat-timeout 2s)" == hang_reason(
        13.0, 10.0, HangPolicy(2.0, source=HeartbeatSource.OUTPUT)
    )
    assert "no first heartbeat within --startup-timeout 60s" == hang_reason(
        99.0, None, HangPolicy(10.0, startup_timeout_s=60.0)
    )


def test_a_touched_heartbeat_file_is_a_beat_but_an_empty_log_is_not(tmp_path: Path) -> None:
    """`touch $ELASTIC_HEARTBEAT_FILE` beats (any program can); a log beats once it grows."""
    beat, log = tmp_path / "rank-0.heartbeat", tmp_path / "rank-0.log"
    assert None is signature(str(beat), heartbeat_file=True)
    beat.touch()
    log.touch()
    first = signature(str(beat), heartbeat_file=True)
    assert first is not None
    assert None is signature(str(log), heartbeat_file=False)
    os.utime(beat, ns=(0, first[0][1] + 1_000_000))
    assert first != signature(str(beat), heartbeat_file=True)
    log.write_text("step 1\n")
    assert None is not signature(str(log), heartbeat_file=False)


# -- classification ----------------------------------------------------------------------


def _hung_exit(returncode: int = -signal.SIGKILL) -> WorkerExit:
    return WorkerExit(attempt=0, rank=1, node="n0", returncode=returncode, observed_at=5.0,
                      hung="no heartbeat for 2.4s (--heartbeat-timeout 2s)")


def test_a_hung_rank_is_classified_hung_with_its_reason() -> None:
    """The SIGKILL that ended a hung rank is ours: kind hung, the reason is the message."""
    exit = _hung_exit()
    assert not exit.succeeded
    assert FailureKind.HUNG == classify(exit)
    failure = to_failure(exit, FailureKind.HUNG)
    assert ("no heartbeat for 2.4s (--heartbeat-timeout 2s)", signal.SIGKILL, 137) == (
        failure.message, failure.signal, failure.exit_status
    )


def test_a_hung_rank_after_a_failure_or_a_stop_is_collateral() -> None:
    """Hung after the first failure, or after the drain began, is only a consequence."""
    assert FailureKind.COLLATERAL == classify(_hung_exit(), failure_seen=True)
    assert FailureKind.COLLATERAL == classify(_hung_exit(), stop_sent=True)


# -- the beacon ------------------------------------------------------------------------


def test_beacon_without_a_launcher_does_nothing() -> None:
    """With ELASTIC_HEARTBEAT_FILE unset, a beat writes nothing, ever."""
    beacon = Beacon.from_env({})
    for step in range(1000):
        beacon.beat(step)
    assert (None, 0) == (beacon.path, beacon.writes)


def test_beacon_writes_at_most_once_per_interval(tmp_path: Path) -> None:
    """80 beats over 10 s of a fake clock are 20 writes: one per 0.5 s interval."""
    clock = FakeClock(start=0.0)
    path = tmp_path / "rank-0.heartbeat"
    beacon = Beacon(str(path), interval_s=0.5, clock=clock.monotonic, wall=clock.time)
    for step in range(80):
        beacon.beat(step)
        clock.advance(0.125)
    beacon.close()
    assert 20 == beacon.writes
    assert {"step": 76, "time": clock.time() - 0.5, "pid": os.getpid()} == json.loads(path.read_text())


def test_beacon_rewrites_the_file_in_place(tmp_path: Path) -> None:
    """A shorter line after a longer one leaves no trailing bytes; no step (or a bad one) is null."""
    clock = FakeClock(start=0.0)
    path = tmp_path / "rank-0.heartbeat"
    beacon = Beacon(str(path), clock=clock.monotonic, wall=clock.time)
    beacon.beat(10**12)
    clock.advance(1.0)
    beacon.beat()
    assert None is json.loads(path.read_text())["step"]
    clock.advance(1.0)
    beacon.beat("not a step")  # type: ignore[arg-type]
    beacon.close()
    assert (3, None) == (beacon.writes, json.loads(path.read_text())["step"])
    assert 0o600 == path.stat().st_mode & 0o777


def test_beacon_never_raises_into_training(tmp_path: Path) -> None:
    """A heartbeat file that cannot be written is skipped, not raised."""
    clock = FakeClock(start=0.0)
    beacon = Beacon(str(tmp_path / "missing-dir" / "rank-0.heartbeat"), clock=clock.monotonic)
    for _ in range(3):
        beacon.beat(1)
        clock.advance(1.0)
    assert 0 == beacon.writes


def test_beacon_writes_the_compute_totals_it_is_given(tmp_path: Path) -> None:
    """compute_s totals and their step count go into the line (the node takes differences)."""
    clock = FakeClock(start=0.0)
    path = tmp_path / "rank-0.heartbeat"
    beacon = Beacon(str(path), clock=clock.monotonic, wall=clock.time)
    beacon.beat(7, compute=(1.25, 8))
    beacon.close()
    line = json.loads(path.read_text())
    assert (7, 1.25, 8) == (line["step"], line["compute_s"], line["compute_steps"])


def test_heartbeat_sums_compute_s_between_beats(tmp_path: Path) -> None:
    """Every call's compute_s counts, also those between two writes."""
    path = tmp_path / "rank-0.heartbeat"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTIC_")}
    code = (
        "import time, elastic\n"
        "for step in range(100): elastic.heartbeat(step=step, compute_s=0.01)\n"
        "time.sleep(0.15)\n"
        "elastic.heartbeat(step=100, compute_s=0.01)\n"
    )
    _python(code, {**env, HEARTBEAT_FILE_VAR: str(path)})
    line = json.loads(path.read_text())
    assert (100, 101) == (line["step"], line["compute_steps"])
    assert 1.01 == pytest.approx(line["compute_s"])


def test_compute_s_that_is_no_time_is_left_out_and_the_beat_stays_json(tmp_path: Path) -> None:
    """NaN, infinite or negative compute_s (a timer gone wrong) counts nothing; the file stays
    JSON, so its steps and its ``done`` are still read."""
    path = tmp_path / "rank-0.heartbeat"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTIC_")}
    code = (
        "import elastic\n"
        "elastic.heartbeat(step=1, compute_s=0.5)\n"
        "for bad in (float('nan'), float('inf'), -1.0): elastic.heartbeat(step=2, compute_s=bad)\n"
        "elastic.heartbeat(step=3, done=True, compute_s=0.25)\n"
    )
    _python(code, {**env, HEARTBEAT_FILE_VAR: str(path)})
    line = json.loads(path.read_text())
    assert (3, True, 0.75, 2) == (line["step"], line["done"], line["compute_s"], line["compute_steps"])


def _python(code: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    return done.stdout.strip()


def test_import_elastic_and_call_heartbeat_loads_nothing_heavy(tmp_path: Path) -> None:
    """`import elastic; elastic.heartbeat(step=...)` writes the file and loads no launcher code."""
    path = tmp_path / "rank-0.heartbeat"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTIC_")}
    code = (
        "import sys, elastic\n"
        "loaded = 'elastic.heartbeat' in sys.modules\n"
        "for step in range(1000): elastic.heartbeat(step=step)\n"
        "from elastic.heartbeat import HangPolicy\n"  # either import order works
        "elastic.heartbeat(step=1)\n"
        "heavy = ['ray', 'structlog', 'tenacity', 'transitions', 'subprocess', 'threading',\n"
        "         'elastic.node.supervisor', 'elastic.run.driver', 'elastic.core.launch.plan']\n"
        "print(loaded, sorted(m for m in heavy if m in sys.modules))\n"
    )
    assert "False []" == _python(code, {**env, HEARTBEAT_FILE_VAR: str(path)})
    assert 0 == json.loads(path.read_text())["step"]
    assert "False []" == _python(code, env)  # no launcher: a no-op


def test_startup_timeout_without_heartbeat_timeout_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--startup-timeout and --heartbeat-source mean nothing alone: exit 2, naming the flag."""
    assert 2 == main(["run", "--startup-timeout", "5", "--", "true"])
    assert "--startup-timeout: needs --heartbeat-timeout" in capsys.readouterr().err
    assert 2 == main(["run", "--heartbeat-source", "output", "--", "true"])
    assert "--heartbeat-source: needs --heartbeat-timeout" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["run", "--heartbeat-timeout", "0", "--", "true"])
    assert 2 == exited.value.code
    assert "--heartbeat-timeout: must be a number of seconds > 0" in capsys.readouterr().err
