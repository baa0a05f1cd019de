"""The sweep read back from a results.json, running nothing: medians over repeats per mix and MTBF, and the SVG figure.

matplotlib is in the ``test`` extra (as in ``benchmarks``) so that the figure is drawn here, not skipped."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from bench_goodput import parse_args
from goodput.figure import cases_of, draw, main, merged, series
from goodput.summary import group, overview_table, summary_table

SVG = "{http://www.w3.org/2000/svg}"


def job(launcher: str, goodput: float | None, verdict: str = "finished", checkpoint_s: float = 0.1,
        recoveries: tuple[float | None, ...] = (2.0, None)) -> dict[str, Any]:
    """One launcher's result as JobResult.as_dict writes it (the fields the summary reads)."""
    return {
        "launcher": launcher, "verdict": verdict, "goodput": goodput, "redone": 4,
        "truth": {"checkpoint_s": checkpoint_s, "unique_steps": 100},
        "injected": [{"kind": "sigkill", "t": 1.0}, {"kind": "node_lost", "t": 2.0}][:len(recoveries)],
        "recoveries": list(recoveries), "scheduled": 2,
        "ledger": {"goodput": None if goodput is None else goodput + 0.01} if launcher == "elastic" else None,
    }


def case(mix: str, mtbf_steps: float, repeat: int, elastic: float, torchrun: float | None,
         verdict: str = "finished") -> dict[str, Any]:
    return {
        "mix": mix, "mtbf_steps": mtbf_steps, "repeat": repeat, "seed": repeat,
        "settings": {"step_s": 0.2, "checkpoint_every": 10},
        "schedule": {"mix": mix, "seed": repeat, "mtbf_s": mtbf_steps * 0.2},
        "results": [job("elastic", elastic), job("torchrun", torchrun, verdict)],
    }


def sweep() -> dict[str, Any]:
    """Two mixes, two MTBFs, two repeats; torchrun hung once and gave no goodput once."""
    return {
        "created": "2026-12-07T10:00:00+0000", "platform": "Linux-test", "cpus": 2,
        "cases": [
            case("llama3", 20, 0, 0.40, 0.30), case("llama3", 20, 1, 0.50, 0.20, "not done 120 s after the end (stopped)"),
            case("llama3", 80, 0, 0.70, 0.60), case("llama3", 80, 1, 0.80, None),
            case("spot", 20, 0, 0.45, 0.35), case("spot", 20, 1, 0.55, 0.25),
            case("spot", 80, 0, 0.75, 0.65), case("spot", 80, 1, 0.85, 0.55),
        ],
    }


def test_each_launchers_line_is_the_median_and_range_over_repeats_at_each_mtbf() -> None:
    cases = sweep()["cases"]

    assert [(20.0, 0.45, 0.40, 0.50, 2), (80.0, 0.75, 0.70, 0.80, 2)] == [
        pytest.approx(p) for p in series(cases, "llama3", "elastic")]
    assert [(20.0, 0.25, 0.20, 0.30, 2), (80.0, 0.60, 0.60, 0.60, 1)] == [
        pytest.approx(p) for p in series(cases, "llama3", "torchrun")]
    assert [("llama3", 20.0), ("llama3", 80.0), ("spot", 20.0), ("spot", 80.0)] == list(group(cases))


def test_the_summary_gives_medians_over_repeats_pooled_recoveries_verdicts_and_young_daly() -> None:
    cases = group(sweep()["cases"])[("llama3", 80.0)]

    lines = summary_table(cases).splitlines()

    assert "|  | elastic | torchrun |" == lines[0]
    assert "| goodput (truth), median (min–max) of 2 | 0.750 (0.700–0.800) | 0.600, none in 1 |" in lines
    assert "| elastic's ledger, median | 0.760 | - |" in lines
    assert "| events injected / scheduled | 4/4 | 4/4 |" in lines
    assert "| recovery s, sigkill: median / worst (n) | 2.0 / 2.0 (2) | 2.0 / 2.0 (2) |" in lines
    assert "| verdicts | 2 finished | 2 finished |" in lines
    assert "| checkpoint interval s (used) | 2.00 | 2.00 |" in lines
    assert "| Young/Daly interval s | 1.79 | 1.79 |" in lines  # sqrt(2 x 0.1 s x 16 s)
    hung = summary_table(group(sweep()["cases"])[("llama3", 20.0)]).splitlines()
    assert "| verdicts | 2 finished | 1 finished, 1 not done 120 s after the end (stopped) |" in hung


def test_the_figure_has_a_panel_per_mix_and_a_line_and_range_per_launcher(tmp_path: Path) -> None:
    """Text stays text in the SVG; each line and band carries an id naming its mix and launcher."""
    path = draw(sweep(), tmp_path / "goodput.svg")

    svg = ET.parse(path).getroot()
    ids = {e.get("id") for e in svg.iter() if e.get("id")}
    for mix in ("llama3", "spot"):
        assert {f"goodput-{mix}-elastic", f"goodput-{mix}-torchrun", f"range-{mix}-elastic"} <= ids
    texts = ["".join(e.itertext()) for e in svg.iter(f"{SVG}text")]
    assert {"llama3 (median of 2, range shaded)", "spot (median of 2, range shaded)", "elastic", "torchrun",
            "goodput (truth)", "mean time between failures, steps of 0.2 s"} <= set(texts)
    assert path.read_text() == draw(sweep(), tmp_path / "again.svg").read_text()  # the same results, the same file


def test_the_command_draws_beside_results_json_and_prints_a_table_per_mix_and_mtbf(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "results.json").write_text(json.dumps(sweep()))

    assert 0 == main([str(tmp_path / "results.json")])

    printed = capsys.readouterr().out
    assert 4 == printed.count("| goodput (truth), median (min–max) of 2 |")
    assert "spot, mean time between failures 80 steps:" in printed
    assert ET.parse(tmp_path / "goodput.svg").getroot().tag == f"{SVG}svg"


def test_a_results_json_of_one_run_before_sweeps_reads_as_one_case() -> None:
    one = {"settings": {"step_s": 0.2, "checkpoint_every": 10}, "schedule": {"mix": "llama3", "seed": 0, "mtbf_s": 15.0},
           "results": [job("elastic", 0.4)]}

    (only,) = cases_of(one)

    assert (only["mix"], only["mtbf_steps"], only["results"], only["folder"]) == ("llama3", 75.0, one["results"], ".")


def test_several_results_files_are_one_sweep_whose_repeats_are_every_files_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """A sweep run in two parts, each repeat of every case once: each case's median is over both."""
    first, second = sweep(), sweep()
    first["cases"] = [{**c, "folder": f"{c['mix']}-{c['mtbf_steps']:g}-r{c['repeat']}"} for c in first["cases"] if c["repeat"] == 0]
    second["cases"] = [{**c, "folder": f"{c['mix']}-{c['mtbf_steps']:g}-r0"} for c in second["cases"] if c["repeat"] == 1]
    second["created"] = "2026-12-08T10:00:00+0000"
    for name, results in (("a", first), ("b", second)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(results))

    both = merged([tmp_path / "a" / "results.json", tmp_path / "b" / "results.json"])

    assert both["created"] == "2026-12-07T10:00:00+0000 and 2026-12-08T10:00:00+0000"
    assert both["platform"] == "Linux-test"
    assert [c["folder"] for c in both["cases"]][:2] == [str(tmp_path / "a" / "llama3-20-r0"), str(tmp_path / "a" / "llama3-80-r0")]
    assert series(both["cases"], "llama3", "elastic") == series(sweep()["cases"], "llama3", "elastic")
    assert 0 == main([str(tmp_path / "a" / "results.json"), str(tmp_path / "b" / "results.json")])
    assert 4 == capsys.readouterr().out.count("| goodput (truth), median (min–max) of 2 |")
    assert (tmp_path / "a" / "goodput.svg").exists()


def test_several_mixes_and_mtbfs_are_comma_separated_and_repeats_counted(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args(["--mix", "llama3,spot", "--mtbf-steps", "20,40", "--repeats", "3"])
    assert (args.mixes, args.mtbfs, args.repeats, args.mix, args.mtbf_steps) == (
        ["llama3", "spot"], [20.0, 40.0], 3, "llama3", 20.0)
    for argv, flag in ((["--mtbf-steps", "20,x"], "--mtbf-steps"), (["--repeats", "0"], "--repeats"),
                       (["--mix", "llama3,tpu"], "--mix")):
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert flag in capsys.readouterr().err


def test_the_overview_has_a_row_per_mix_and_mtbf_with_each_launchers_median_and_range() -> None:
    rows = overview_table(sweep()["cases"]).splitlines()
    assert "| mix, MTBF steps | repeats | elastic | torchrun |" == rows[0]
    assert "| llama3, 20 | 2 | **0.450 (0.400–0.500)** | 0.250 (0.200–0.300) |" == rows[2]
    assert "| llama3, 80 | 2 | **0.750 (0.700–0.800)** | 0.600, none in 1 |" == rows[3]
    assert 6 == len(rows)
