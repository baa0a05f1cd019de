"""The write probe of a directory: the directory left as it was found (its speed: the closing
note of issue 35; wall-clock limits are not asserted here)."""

from __future__ import annotations

import os
from pathlib import Path

from elastic.node.probes.writable import write_problem


def test_a_writable_directory_is_probed_and_left_as_found(tmp_path: Path) -> None:
    """Missing folders are made for the probe and removed again; an existing one keeps only its
    files, and its times: a directory changed in the last second reads as a save under way."""
    (tmp_path / "kept").write_text("x")
    os.utime(tmp_path, ns=(1_000_000_000, 2_000_000_000))
    problems = [write_problem(tmp_path / "a" / "b" / "c"), write_problem(tmp_path)]

    assert [None, None] == problems
    assert ["kept"] == sorted(p.name for p in tmp_path.iterdir())
    assert 2_000_000_000 == os.stat(tmp_path).st_mtime_ns


def test_a_path_under_a_file_names_the_folder_it_could_not_make(tmp_path: Path) -> None:
    (tmp_path / "weights.pt").write_bytes(b"")
    assert f"cannot create {tmp_path}/weights.pt/ck: not a directory" == write_problem(tmp_path / "weights.pt" / "ck" / "x")
    assert f"cannot write in {tmp_path}/weights.pt: not a directory" == write_problem(tmp_path / "weights.pt")
