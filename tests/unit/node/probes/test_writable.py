"""The write probe of a directory: quick, and the directory left as it was found."""

from __future__ import annotations

import time
from pathlib import Path

from elastic.node.probes.writable import write_problem


def test_a_writable_directory_is_probed_in_well_under_a_second_and_left_as_found(tmp_path: Path) -> None:
    """Missing folders are made for the probe and removed again; an existing one keeps only its files."""
    (tmp_path / "kept").write_text("x")
    started = time.monotonic()
    problems = [write_problem(tmp_path / "a" / "b" / "c"), write_problem(tmp_path)]
    took_s = time.monotonic() - started

    assert [None, None] == problems
    assert ["kept"] == sorted(p.name for p in tmp_path.iterdir())
    assert took_s < 0.5, took_s


def test_a_path_under_a_file_names_the_folder_it_could_not_make(tmp_path: Path) -> None:
    (tmp_path / "weights.pt").write_bytes(b"")
    assert f"cannot create {tmp_path}/weights.pt/ck: not a directory" == write_problem(tmp_path / "weights.pt" / "ck" / "x")
    assert f"cannot write in {tmp_path}/weights.pt: not a directory" == write_problem(tmp_path / "weights.pt")
