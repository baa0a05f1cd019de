"""Which commands --prewarm can serve, and the reason it gives for the others."""

from __future__ import annotations

import pytest

from elastic.core.prewarm_fit import is_python, prewarm_unfit


@pytest.mark.parametrize("path", ["python", "python3", "python3.11", "/usr/bin/python3.12", "venv/bin/python"])
def test_cpython_by_name_is_python(path: str) -> None:
    assert is_python(path)


@pytest.mark.parametrize("path", ["pythonw", "python3-config", "ipython", "sh", "/usr/bin/env"])
def test_other_programs_are_not_python(path: str) -> None:
    assert not is_python(path)


def test_a_python_script_with_arguments_can_be_prewarmed() -> None:
    assert prewarm_unfit(("python", "train.py", "--lr", "0.1")) is None


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (("torchrun", "train.py"), "runs 'torchrun', not python"),
        (("python",), "given no script"),
        (("python", "-m", "train"), "the option '-m'"),
        (("python3", "-u", "train.py"), "the option '-u'"),
        (("python", "train"), "'train' is not a .py script"),
        ((), "runs 'nothing'"),
    ],
)
def test_the_reason_names_what_is_not_python_script(argv: tuple[str, ...], why: str) -> None:
    reason = prewarm_unfit(argv)
    assert reason is not None and why in reason
    assert "python SCRIPT.py ARGS" in reason
