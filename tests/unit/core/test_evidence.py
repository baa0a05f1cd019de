"""How a rank ended, read once: the exception that ended it, its own account, past start-up.

Table-driven on the real shapes ranks print, and property-based (hypothesis) over what may
stand around a traceback: prefixes, at-exit noise, the program's own lines after it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from elastic.core.evidence import (
    MESSAGE_LINES, STARTUP_WITHOUT_STEP_S, CaughtSignal, EndingError, ending_error, exception_name, final_traceback,
    past_startup, read_account, unprefixed,
)

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/work/train.py", line 41, in <module>',
    "    torch.save(model.state_dict(), out)",
    '  File "/work/venv/lib/python3.11/site-packages/torch/serialization.py", line 966, in save',
    "    with _open_zipfile_writer(f) as opened_zipfile:",
    "         ^^^^^^^^^^^^^^^^^^^^^^^",
    "OSError: [Errno 28] No space left on device",
]
DESTROY_WARNING = (
    "[rank1]:[W1207 03:45:36.408271257 ProcessGroupNCCL.cpp:1250] Warning: WARNING: destroy_process_group() was not "
    "called before program exit, which can leak resources. For more info, please see "
    "https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())"
)
AT_EXIT_NOISE = [
    DESTROY_WARNING,
    "W1207 03:45:36.408271 1234 gloo.cc:99] closing",
    "/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be "
    "1 leaked semaphore objects to clean up at shutdown",
    "  warnings.warn('resource_tracker: There appear to be %d '",
    "Exception ignored in: <function _after_fork at 0x7f>",
    "",
]
PROGRAM_LINES = ["epoch 0 iter 5 loss 2.31", "saving checkpoint to out/step-5", "INFO:root:eval accuracy 0.71",
                 "step 6", "throughput 1234 tokens/s"]


def _prefixed(lines: list[str], rank: int) -> list[str]:
    """As torch's excepthook prints them (``[rankN]: `` before every line)."""
    return [f"[rank{rank}]: {line}" if line else "" for line in lines]


@pytest.mark.parametrize(
    ("lines", "line"),
    [
        (TRACEBACK, "OSError: [Errno 28] No space left on device"),
        # torch >= 2.3's excepthook: every line prefixed.
        (_prefixed(TRACEBACK, 1), "OSError: [Errno 28] No space left on device"),
        # torch's exit-time warning after a plain traceback.
        ([*TRACEBACK, DESTROY_WARNING], "OSError: [Errno 28] No space left on device"),
        # A deep traceback whose head the 20-line tail cut off.
        (TRACEBACK[1:], "OSError: [Errno 28] No space left on device"),
        # A SyntaxError in the main script has no head, only its frame.
        (['  File "/work/train.py", line 3', "    def f(:", "          ^", "SyntaxError: invalid syntax"],
         "SyntaxError: invalid syntax"),
        # Chained: the last block is the one that ended it.
        ([*TRACEBACK, "", "During handling of the above exception, another exception occurred:", "",
          "Traceback (most recent call last):", '  File "/work/train.py", line 44, in <module>', "    upload()",
          "ConnectionError: upload failed"], "ConnectionError: upload failed"),
        # A multi-line message (NCCL's) is the exception's own.
        (["Traceback (most recent call last):", '  File "t.py", line 1, in <module>',
          "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
          "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
          "Last error:", "socketStartConnect: Connect to 10.0.0.2<45123> failed : Connection refused"],
         "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"),
        (["AssertionError"], None),  # no traceback: nothing says it ended the rank
        (["Traceback (most recent call last):", '  File "t.py", line 9, in <module>', "AssertionError"],
         "AssertionError"),
        # Handled: logged, then the program went on.
        ([*TRACEBACK, *PROGRAM_LINES], None),
        (["step 1", "done"], None),
        ([], None),
    ],
)
def test_the_exception_that_ended_the_rank_is_its_final_traceback(lines: list[str], line: str | None) -> None:
    found = ending_error(lines)
    assert line == (None if found is None else found.line)


def test_the_interpreters_own_record_and_the_error_file_outweigh_the_output() -> None:
    """The excepthook's record first, then @record's message; a death by signal leaves only those."""
    handled = [*TRACEBACK, *PROGRAM_LINES]
    assert EndingError("ValueError: bad", "excepthook") == ending_error(handled, uncaught="ValueError: bad")
    assert EndingError("KeyError: 'x'", "error file") == ending_error(handled, recorded="KeyError: 'x'")
    assert ending_error(TRACEBACK, died_of_signal=True) is None
    assert "excepthook" == ending_error(TRACEBACK, uncaught="OSError: x", died_of_signal=True).source  # type: ignore[union-attr]


@settings(max_examples=200, deadline=None)
@given(rank=st.integers(0, 4095), noise=st.lists(st.sampled_from(AT_EXIT_NOISE), max_size=6),
       prefixed=st.booleans())
def test_a_traceback_followed_only_by_at_exit_noise_ended_the_rank(rank: int, noise: list[str], prefixed: bool) -> None:
    """Whatever the rank prefix and whatever an interpreter prints on its way out."""
    lines = [*TRACEBACK, *noise]
    found = ending_error(_prefixed(lines, rank) if prefixed else lines)
    assert found is not None and "OSError: [Errno 28] No space left on device" == found.line


@settings(max_examples=200, deadline=None)
@given(before=st.lists(st.sampled_from(PROGRAM_LINES), max_size=5),
       after=st.lists(st.sampled_from(PROGRAM_LINES), min_size=MESSAGE_LINES + 1, max_size=12),
       noise=st.lists(st.sampled_from(AT_EXIT_NOISE), max_size=3), prefixed=st.booleans())
def test_a_traceback_the_program_went_on_after_never_ended_it(
    before: list[str], after: list[str], noise: list[str], prefixed: bool
) -> None:
    """An import probe's logged traceback, then the program's own lines: handled, prefix or not."""
    lines = [*before, *TRACEBACK, *after, *noise]
    assert ending_error(_prefixed(lines, 3) if prefixed else lines) is None


@given(st.lists(st.text(max_size=40), max_size=25))
def test_any_output_is_read_without_error(lines: list[str]) -> None:
    """A tail of anything reads as an ending exception or none, never an error."""
    found = final_traceback(lines)
    assert found is None or 0 <= found[0] < len(lines)


@pytest.mark.parametrize(("line", "name"), [
    ("OSError: [Errno 28] No space left on device", "OSError"),
    ("torch.distributed.DistBackendError: NCCL error", "DistBackendError"),
    ("AssertionError", "AssertionError"),
    ("epoch 0 iter 5 loss 2.3", None),
])
def test_an_exception_is_named_without_its_module(line: str, name: str | None) -> None:
    assert name == exception_name(line)


def test_a_prefix_is_taken_off_with_its_space_and_the_indentation_kept() -> None:
    assert '  File "t.py", line 1' == unprefixed('[rank12]:   File "t.py", line 1')
    assert "ValueError: x" == unprefixed("\x1b[31m[default0]: ValueError: x\x1b[0m")


NOW = 1_000_000.0


def _entry(**fields: object) -> str:
    return json.dumps({"time": NOW - 2.0, "pid": 7, **fields})


def test_the_account_holds_each_signals_latest_catch_the_sync_point_and_the_uncaught_exception() -> None:
    text = "\n".join([
        _entry(signal=1, name="SIGHUP", handler="reopen (log.py:3)", at_exit=False, time=NOW - 3600.0),
        _entry(signal=15, name="SIGTERM", handler="save (train.py:9)", at_exit=False),
        _entry(signal=1, name="SIGHUP", handler="reopen (log.py:3)", at_exit=False, time=NOW - 60.0),
        '{"torn',
        _entry(preemption_sync=12),
        _entry(uncaught="OSError: [Errno 28] No space left on device"),
    ])
    account = read_account(text, now=NOW)
    assert (CaughtSignal(15, "SIGTERM", 2.0, False, "save (train.py:9)", pid=7),
            CaughtSignal(1, "SIGHUP", 60.0, False, "reopen (log.py:3)", pid=7)) == account.caught
    assert (12, 2.0) == account.preemption_sync
    assert "OSError: [Errno 28] No space left on device" == account.uncaught


def test_an_exception_another_python_process_wrote_is_not_the_ranks() -> None:
    """A Python process the rank started inherits its signals file; its uncaught exception (an
    import probe run as a subprocess) is told apart by its pid."""
    text = "\n".join([_entry(uncaught="ImportError: probe", pid=8), _entry(uncaught="OSError: disk", pid=7)])
    assert "OSError: disk" == read_account(text, now=NOW, pid=7).uncaught
    assert read_account(_entry(uncaught="ImportError: probe", pid=8), now=NOW, pid=7).uncaught is None


@pytest.mark.parametrize(("step_seen", "ran_s", "printed", "past"), [
    (True, 0.0, False, True),
    (False, 5.0, True, False),
    (False, STARTUP_WITHOUT_STEP_S, True, True),  # unknown progress lines, hours in: past start-up
    (False, STARTUP_WITHOUT_STEP_S * 10, False, False),  # silent all along: still starting
    (False, None, False, True),  # not known: the cheaper error
])
def test_past_start_up_needs_a_step_or_time_and_output(
    step_seen: bool, ran_s: float | None, printed: bool, past: bool
) -> None:
    assert past == past_startup(step_seen=step_seen, ran_s=ran_s, printed=printed)
