"""The rank bootstrap imports nothing of elastic, so it spells the variables it shares with the
launcher itself; each spelling agrees with the launcher's."""

from __future__ import annotations

import ast
from pathlib import Path

from elastic.node.spawner import prewarm_pool
from elastic.worker.bootstrap import rank_signals, startup_marks

SITECUSTOMIZE = Path(startup_marks.__file__).with_name("sitecustomize.py")


def bootstrap_constants() -> dict[str, object]:
    """The module-level constants of the bootstrap's ``sitecustomize.py``, read without running it."""
    tree = ast.parse(SITECUSTOMIZE.read_text())
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def test_the_bootstrap_writes_start_up_marks_to_the_file_the_launcher_names() -> None:
    assert startup_marks.STARTUP_FILE_VAR == bootstrap_constants()["_STARTUP_FILE_VAR"]


def test_the_bootstrap_watches_os_environ_under_the_variable_the_prewarm_pool_sets() -> None:
    assert prewarm_pool.WATCH_VAR == bootstrap_constants()["_WATCH_VAR"]


def test_the_bootstrap_knows_a_rank_installed_a_handler_by_the_variable_rank_signals_sets() -> None:
    assert rank_signals.OWNER_VAR == bootstrap_constants()["_OWNER_VAR"]
