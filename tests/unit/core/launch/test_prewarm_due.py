"""When a rank's warm successor starts: once the rank is past its start-up, step printed or not."""

from __future__ import annotations

from elastic.core.evidence import STARTUP_WITHOUT_STEP_S
from elastic.core.launch.prewarm_due import successor_due

STARTING = {"interpreter": 100.0, "init_begin": 103.0}


def test_a_rank_still_in_its_distributed_init_has_no_successor_yet() -> None:
    assert not successor_due(STARTING, beat=False, printed=True, ran_s=5.0)


def test_a_rank_whose_distributed_init_returned_is_past_its_start_up_though_it_prints_nothing() -> None:
    assert successor_due({**STARTING, "init_end": 104.0}, beat=False, printed=False, ran_s=5.0)


def test_a_heartbeat_is_a_sign_of_life_past_start_up() -> None:
    assert successor_due({"interpreter": 100.0}, beat=True, printed=False, ran_s=1.0)


def test_a_program_without_distributed_init_is_past_start_up_once_it_printed_and_ran_long_enough() -> None:
    assert not successor_due({}, beat=False, printed=True, ran_s=STARTUP_WITHOUT_STEP_S - 1)
    assert not successor_due({}, beat=False, printed=False, ran_s=STARTUP_WITHOUT_STEP_S)
    assert successor_due({}, beat=False, printed=True, ran_s=STARTUP_WITHOUT_STEP_S)
