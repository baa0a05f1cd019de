"""What --prewarm relies on: the frameworks read none of the attempt's variables while they import."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from harness import script, skip_unless_installed

from elastic.core.launch.spec import LAUNCH_VARIABLES


@pytest.mark.parametrize(
    "modules",
    [["torch", "torch.distributed", "torch.nn.parallel"], ["jax", "jax.numpy", "orbax.checkpoint"]],
    ids=["torch", "jax-orbax"],
)
def test_importing_a_framework_reads_no_launch_variable(modules: list[str]) -> None:
    skip_unless_installed(modules[0])  # imported in the subprocess only
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(script("env_reads_at_import.py", *modules), env=env, capture_output=True, text=True,
                          timeout=300, check=True)
    read = set(json.loads(done.stdout.splitlines()[-1]))

    assert read, "nothing read: the watch saw nothing, the test proves nothing"
    assert set() == read & LAUNCH_VARIABLES
