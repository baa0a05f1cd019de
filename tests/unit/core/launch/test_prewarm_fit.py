"""Which commands --prewarm can serve, and the reason it gives for the others."""

from __future__ import annotations

import pytest

from elastic.core.launch.prewarm_fit import is_python, learned_prewarm, prewarm_unfit


@pytest.mark.parametrize("path", ["python", "python3", "python3.11", "/usr/bin/python3.12", "venv/bin/python"])
def test_cpython_by_name_is_python(path: str) -> None:
    assert is_python(path)


@pytest.mark.parametrize("path", ["pythonw", "python3-config", "ipython", "sh", "/usr/bin/env"])
def test_other_programs_are_not_python(path: str) -> None:
    assert not is_python(path)


def test_a_python_script_with_arguments_can_be_prewarmed() -> None:
    assert prewarm_unfit(("python", "train.py", "--lr", "0.1")) is None


@pytest.mark.parametrize("module", ["train", "maxtext.trainers.pre_train.train", "trl.scripts.sft"])
def test_a_python_module_with_arguments_can_be_prewarmed(module: str) -> None:
    assert prewarm_unfit(("python3", "-m", module, "base.yml", "run_name=x")) is None


def test_the_module_python_m_runs_is_never_prewarmed() -> None:
    """Imported at the prewarm, its code would run without the rank's variables, then again as __main__."""
    reason = prewarm_unfit(("python", "-m", "pkg.train", "x"), ("torch", "pkg.train"))
    assert reason is not None and "'pkg.train', the module python -m runs" in reason
    assert prewarm_unfit(("python", "-m", "pkg.train", "x"), ("torch", "pkg")) is None


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (("torchrun", "train.py"), "runs 'torchrun', not python"),
        (("python",), "given no script"),
        (("python", "-c", "import train"), "the option '-c'"),
        (("python", "-m"), "python -m is given nothing"),
        (("python", "-m", "-u"), "python -m is given '-u', not a module name"),
        (("python", "-m", "my-trainer"), "python -m is given 'my-trainer', not a module name"),
        (("python3", "-u", "train.py"), "the option '-u'"),
        (("python", "train"), "'train' is not a .py script"),
        ((), "runs 'nothing'"),
    ],
)
def test_the_reason_names_what_is_not_python_script(argv: tuple[str, ...], why: str) -> None:
    reason = prewarm_unfit(argv)
    assert reason is not None and why in reason
    assert "'python SCRIPT.py ARGS' and 'python -m MODULE ARGS' are prewarmed" in reason


def test_a_learned_prewarm_leaves_out_the_package_python_m_runs_and_unfit_commands() -> None:
    """What a rank imported, less the package of the module `-m` runs and its modules (the program's
    own code); nothing for a command `--prewarm` cannot serve."""
    assert ("torch", "torch._dynamo", "numpy") == learned_prewarm(
        ["python", "train.py"], ["torch", "torch._dynamo", "numpy"]
    )
    assert ("jax", "jax.numpy") == learned_prewarm(
        ["python", "-m", "maxtext.train"], ["maxtext", "jax", "maxtext.layers", "jax.numpy"]
    )
    assert () == learned_prewarm(["python", "-c", "pass"], ["torch"])
    assert () == learned_prewarm(["bash", "run.sh"], ["torch"])
