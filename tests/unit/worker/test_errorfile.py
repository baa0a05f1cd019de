"""Reading torch-style error files: the message and the recorded traceback."""

from __future__ import annotations

import json
from pathlib import Path

from elastic.worker.errorfile import read_error, write_error_file


def test_our_writer_gives_back_message_and_traceback(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    try:
        raise ValueError("loss went NaN")
    except ValueError as error:
        write_error_file(error, path)

    message, traceback = read_error(path)

    assert "ValueError: loss went NaN" == message
    assert traceback is not None and traceback.startswith("Traceback (most recent call last):")
    assert traceback.endswith("ValueError: loss went NaN")


def test_torch_format_and_a_plain_message(tmp_path: Path) -> None:
    torch_file, plain_file = tmp_path / "torch.json", tmp_path / "plain.json"
    torch_file.write_text(json.dumps({"message": {"message": "RuntimeError: boom", "extraInfo": {
        "py_callstack": "Traceback (most recent call last):\n  ...\nRuntimeError: boom\n",
        "timestamp": "1700000000"}}}))
    plain_file.write_text(json.dumps({"message": "RuntimeError: boom"}))

    assert ("RuntimeError: boom", "Traceback (most recent call last):\n  ...\nRuntimeError: boom") == read_error(torch_file)
    assert ("RuntimeError: boom", None) == read_error(plain_file)
    assert (None, None) == read_error(tmp_path / "missing.json")
