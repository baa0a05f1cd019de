"""The tail of a rank's log keeps its last line, however long, marked where it was cut."""

from __future__ import annotations

from pathlib import Path

import pytest

from elastic.node.logs.tail import LINE_HEAD_BYTES, LINE_START_SCAN_BYTES, TAIL_BYTES, cut_mark, read_log_tail

# MaxText's error for a misspelt key: one line naming the key first, then every valid one.
KEYS = ", ".join(repr(f"key_{n:05d}") for n in range(1, 1634))
MAXTEXT_ERROR = f"ValueError: 'num_stpes' not in {KEYS}."


def _log(tmp_path: Path, data: bytes | str) -> Path:
    path = tmp_path / "rank-0.log"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_the_maxtext_line_is_long_enough_to_matter() -> None:
    """The fixture is the issue's line: 21,259 characters, longer than the window."""
    assert 21_259 == len(MAXTEXT_ERROR)
    assert len(MAXTEXT_ERROR) > TAIL_BYTES


def test_short_logs_and_the_last_lines_of_long_ones_are_unchanged(tmp_path: Path) -> None:
    """Lines that fit are returned as they are, the last 20 of them; nothing is marked."""
    assert ("one", "two") == read_log_tail(_log(tmp_path, "one\ntwo\n"))
    many = "".join(f"line {n}\n" for n in range(100))
    assert tuple(f"line {n}" for n in range(80, 100)) == read_log_tail(_log(tmp_path, many))
    assert ("no newline at the end",) == read_log_tail(_log(tmp_path, "no newline at the end"))


def test_a_missing_log_has_no_tail(tmp_path: Path) -> None:
    """A log that was never written (or is gone) gives an empty tail, not an error."""
    assert () == read_log_tail(tmp_path / "absent.log")


def test_a_last_line_longer_than_the_window_is_kept_with_its_head_and_end(tmp_path: Path) -> None:
    """Several lines, the last one of 21,259 characters: it is the tail, its first 512
    characters, the mark of what was cut, then its end; the lines before are out of the window."""
    path = _log(tmp_path, f"Traceback (most recent call last):\n  File \"train.py\", line 3\n{MAXTEXT_ERROR}\n")

    [line] = read_log_tail(path)

    inside = TAIL_BYTES - 1  # the window holds the line's end and its newline
    cut = len(MAXTEXT_ERROR) - LINE_HEAD_BYTES - inside
    assert MAXTEXT_ERROR[:LINE_HEAD_BYTES] + cut_mark(cut) + MAXTEXT_ERROR[-inside:] == line
    assert line.startswith("ValueError: 'num_stpes' not in 'key_00001'")
    assert line.endswith("'key_01633'.")
    assert "…[cut 4,364 characters]…" in line


def test_a_huge_line_followed_by_a_short_one_keeps_both(tmp_path: Path) -> None:
    """The huge line is no longer dropped because a short line follows it."""
    path = _log(tmp_path, f"earlier\n{MAXTEXT_ERROR}\nsrun: error: task 0: Exited with exit code 1\n")

    tail = read_log_tail(path)

    assert 2 == len(tail), tail
    assert tail[0].startswith("ValueError: 'num_stpes' not in") and tail[0].endswith("'key_01633'.")
    assert "…[cut " in tail[0]
    assert "srun: error: task 0: Exited with exit code 1" == tail[1]


def test_a_cut_line_not_among_the_last_lines_is_left_out(tmp_path: Path) -> None:
    """With 20 whole lines after it in the window, the cut line is not in the tail."""
    lines = [f"line {n}" for n in range(30)]
    tail = read_log_tail(_log(tmp_path, MAXTEXT_ERROR + "\n" + "\n".join(lines) + "\n"))

    assert tuple(lines[-20:]) == tail


@pytest.mark.parametrize("before", ["", "first\n"], ids=["only-line", "after-another"])
def test_a_line_that_fills_the_window_exactly_is_whole(tmp_path: Path, before: str) -> None:
    """A last line whose bytes and newline are exactly the window: not cut, not marked."""
    line = "x" * (TAIL_BYTES - 1)
    assert (line,) == read_log_tail(_log(tmp_path, before + line + "\n"))
    no_newline = "y" * TAIL_BYTES  # a file of exactly the window's size
    assert (no_newline,) == read_log_tail(_log(tmp_path, no_newline))


def test_a_line_just_past_the_window_is_whole_and_one_further_is_cut(tmp_path: Path) -> None:
    """A line starting at most 512 bytes before the window is kept whole; one byte
    further, its first 512 characters stay and the mark counts the one cut."""
    whole = "w" * (TAIL_BYTES + LINE_HEAD_BYTES - 1)  # with its newline: 512 bytes before the window
    assert (whole,) == read_log_tail(_log(tmp_path, f"first\n{whole}\n"))

    cut = "h" * LINE_HEAD_BYTES + "C" + "t" * (TAIL_BYTES - 1)
    assert ("h" * LINE_HEAD_BYTES + cut_mark(1) + "t" * (TAIL_BYTES - 1),) == read_log_tail(
        _log(tmp_path, f"first\n{cut}\n")
    )


def test_a_multibyte_character_cut_by_the_window_or_the_head_counts_as_cut(tmp_path: Path) -> None:
    """Cuts land between characters: no half character at either side of the mark, and
    each character cut (in two, too) is counted once."""
    line = "€" * 20_000  # 3 bytes each: the window starts inside one, and so does the head's end
    [tail] = read_log_tail(_log(tmp_path, line + "\n"))

    head, rest = tail.split("…[cut ")
    count, end = rest.split(" characters]…")
    assert set(head) == {"€"} and set(end) == {"€"}, tail[:40]
    assert 20_000 == len(head) + int(count.replace(",", "")) + len(end)
    assert LINE_HEAD_BYTES // 3 == len(head)
    assert (TAIL_BYTES - 1) // 3 == len(end)  # whole characters only


def test_invalid_utf8_in_a_cut_line_reads_as_replacement_characters(tmp_path: Path) -> None:
    """Bytes that are no UTF-8 (a binary blob printed into the line) are kept as U+FFFD."""
    line = b"RuntimeError: bad bytes " + b"\xff\xfe" * 12_000 + b" at the end"
    [tail] = read_log_tail(_log(tmp_path, line + b"\n"))

    assert tail.startswith("RuntimeError: bad bytes \ufffd\ufffd")
    assert tail.endswith("\ufffd\ufffd at the end")
    assert "…[cut " in tail


def test_windows_line_ends_are_line_ends(tmp_path: Path) -> None:
    """\\r\\n ends a line like \\n, also where the window starts between \\r and \\n."""
    tail = read_log_tail(_log(tmp_path, "x" * (TAIL_BYTES + 5) + "\r\nlast\r\n"), max_bytes=7)
    assert ("last",) == tail


def test_a_line_whose_start_is_out_of_reach_is_marked_as_cut_by_more(tmp_path: Path) -> None:
    """A last line that starts more than 1 MiB before the window: its end, marked 'more than'."""
    line = "z" * (LINE_START_SCAN_BYTES + TAIL_BYTES + 10) + " the end"
    [tail] = read_log_tail(_log(tmp_path, line + "\n"))

    assert tail == cut_mark(LINE_START_SCAN_BYTES, at_least=True) + line[-(TAIL_BYTES - 1) :]


def test_a_huge_log_is_read_at_a_bounded_cost(tmp_path: Path) -> None:
    """64 GiB with no line end but the last (sparse): the tail comes back at once, marked."""
    path = tmp_path / "huge.log"
    with path.open("wb") as log:
        log.truncate(64 << 30)
        log.seek(0, 2)
        log.write(b"MemoryError: the end\n")

    [tail] = read_log_tail(path)

    assert tail.startswith("…[cut more than 1,048,576 characters]…")
    assert tail.endswith("MemoryError: the end")
