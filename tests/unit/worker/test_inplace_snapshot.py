"""A rank's committed steps in host memory: the last two kept, restored exactly, never changed by training on."""

from __future__ import annotations

from typing import Any

import pytest

from elastic.worker.inplace.snapshot import Snapshots

torch = pytest.importorskip("torch")


def _train(model: Any, optimizer: Any, steps: int) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(4, 3)).pow(2).sum().backward()
        optimizer.step()


def _weights(model: Any) -> dict[str, Any]:
    return {name: value.clone() for name, value in model.state_dict().items()}


def test_going_back_to_a_kept_step_and_training_on_repeats_the_same_bits() -> None:
    """Restored to step 1 (model, Adam's moments, the random state), steps 2-3 come out as they did."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    snapshots = Snapshots(model, optimizer)
    _train(model, optimizer, 1)
    snapshots.commit(1)
    _train(model, optimizer, 2)
    snapshots.commit(3)
    first = _weights(model)

    snapshots.restore(1)
    _train(model, optimizer, 2)
    assert [] == [name for name, value in _weights(model).items() if not torch.equal(first[name], value)]
    snapshots.commit(3)
    snapshots.restore(1)  # the snapshot of step 1 was not changed by training after it was restored
    _train(model, optimizer, 2)
    assert [] == [name for name, value in _weights(model).items() if not torch.equal(first[name], value)]


def test_the_last_two_commits_are_kept_and_going_back_drops_the_later_one() -> None:
    model = torch.nn.Linear(2, 1)
    snapshots = Snapshots(model, None)
    for step in (5, 10, 15):
        snapshots.commit(step)
    assert (15, None) == (snapshots.latest_step(), snapshots.at(5))
    snapshots.restore(10)
    assert (10, None) == (snapshots.latest_step(), snapshots.at(15))
    with pytest.raises(LookupError, match="step 5"):
        snapshots.restore(5)


def test_a_commit_writes_into_the_buffers_of_the_snapshot_it_drops_and_leaves_the_other_whole() -> None:
    """Steps 1, 2, 3 committed (3 into 1's buffers): going back to 2 still repeats step 3's bits."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    snapshots = Snapshots(model, optimizer)
    for step in (1, 2):
        _train(model, optimizer, 1)
        snapshots.commit(step)
    first = snapshots.at(1)
    assert first is not None
    buffers = {id(tensor) for tensor in first.state["model"].values()}
    _train(model, optimizer, 1)
    snapshots.commit(3)
    after_three = _weights(model)
    latest = snapshots.at(3)
    assert latest is not None and buffers == {id(tensor) for tensor in latest.state["model"].values()}
    assert snapshots.at(1) is None
    snapshots.restore(2)
    _train(model, optimizer, 1)
    assert [] == [name for name, value in _weights(model).items() if not torch.equal(after_three[name], value)]
