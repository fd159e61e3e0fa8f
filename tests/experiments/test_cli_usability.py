"""What a new user meets first: shipped scenarios by name, `quotalab scenarios`, `--version`, `--rounds`, a sweep
file given to `run`, missing Java or an unreachable Ray address in one line, progress lines in a log."""

from __future__ import annotations

import io
import time

import pytest
import yaml

from experiments import catalog, prerequisites
from experiments.cli import main
from experiments.errors import UserError
from experiments.progress import LineProgress
from experiments.run import load_for_run


def test_every_shipped_scenario_and_sweep_is_listed_with_its_description(capsys):
    assert main(["scenarios"]) == 0
    printed = capsys.readouterr().out
    for folder in (catalog.SCENARIOS, catalog.SWEEPS):
        for path in folder.glob("*.yaml"):
            data = yaml.safe_load(path.read_text())
            description = " ".join(data.get("description", path.read_text().splitlines()[0][2:]).split())
            assert f"  {path.stem}" in printed and description in printed
    assert printed.index("Scenarios (quotalab run NAME") < printed.index("Sweeps (quotalab sweep NAME")


def test_a_shipped_scenario_runs_by_name_and_a_path_wins(tmp_path, monkeypatch):
    assert catalog.scenario_file("churn-and-loss") == catalog.SCENARIOS / "churn-and-loss.yaml"
    assert catalog.scenario_file("churn-and-loss.yaml") == catalog.SCENARIOS / "churn-and-loss.yaml"
    assert catalog.sweep_file("quick") == catalog.SWEEPS / "quick.yaml"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "churn-and-loss").write_text("mine")
    assert catalog.scenario_file("churn-and-loss").resolve() == (tmp_path / "churn-and-loss").resolve()
    with pytest.raises(UserError, match="nowhere: no such file, nor a shipped scenario"):
        catalog.scenario_file("nowhere")


def test_run_on_a_sweep_file_points_at_quotalab_sweep(capsys):
    assert main(["run", "quick"]) == 2  # a shipped sweep's name
    assert capsys.readouterr().err.strip() == (
        "quotalab run: quick: a shipped sweep, not a scenario; run it with: quotalab sweep quick"
    )
    with pytest.raises(UserError, match="churn-and-loss: a shipped scenario, not a sweep; run it with: quotalab run"):
        catalog.sweep_file("churn-and-loss")
    sweep = str(catalog.SWEEPS / "quick.yaml")
    assert main(["run", sweep]) == 2
    error = capsys.readouterr().err.strip()
    assert error == f"quotalab run: {sweep}: a sweep file (it names a base scenario to vary); run it with: " + (
        f"quotalab sweep {sweep}"
    )


def test_rounds_cuts_the_run_and_says_which_events_it_dropped(capsys):
    scenario = load_for_run("churn-and-loss", {"backend": "local"}, 20)
    assert scenario.rounds == 20
    assert all(event.at < 20 for event in scenario.events)
    note = capsys.readouterr().err
    assert note.startswith("--rounds 20: ") and "4 event(s) dropped (at 25, 35, 42, 42)" in note
    cut = load_for_run("churn-and-loss", {}, 10)  # broker-5 joins at 12: left out of a 10-round run
    assert "broker-5" not in [broker.name for broker in cut.brokers]
    assert "broker(s) joining later left out: broker-5" in capsys.readouterr().err


def test_version_and_report_help(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.startswith("quotalab ")
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    help_text = capsys.readouterr().out
    assert "DESIGN.md" not in help_text and "--verbose" in help_text and "docs/reports.md" in help_text


@pytest.mark.parametrize(
    ("answer", "major"),
    [('openjdk version "17.0.9" 2023-10-17', 17), ('java version "1.8.0_392"', 8), ('version "21"', 21), ("", None)],
)
def test_java_major_version(answer, major):
    assert prerequisites.java_major(answer) == major


def test_missing_java_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))  # no bin/java there
    with pytest.raises(UserError, match=r"^Java not found \(JAVA_HOME=.* has no bin/java\)\. Spark needs Java 17"):
        prerequisites.check_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="no java on the PATH"):
        prerequisites.check_java()


def test_demo_checks_java_before_any_run(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["demo", "--backend", "local", "--out", str(tmp_path / "demo")]) == 2
    assert "Java not found" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()  # nothing ran


def test_an_unreachable_ray_address_fails_in_one_line_within_the_timeout():
    started = time.monotonic()
    with pytest.raises(UserError, match=r"--address 127.0.0.1:1: no Ray cluster answers at 127.0.0.1:1 within 2 s"):
        prerequisites.check_ray_address("127.0.0.1:1", timeout_s=2.0)
    assert time.monotonic() - started < 10.0
    with pytest.raises(UserError, match="expected host:port"):
        prerequisites.check_ray_address("nowhere")


def test_progress_off_a_terminal_is_a_line_every_ten_percent():
    stream = io.StringIO()
    progress = LineProgress(total=60, desc="churn-and-loss", unit="rounds", stream=stream)
    for _ in range(60):
        progress.update()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10
    assert lines[0].startswith("churn-and-loss: 10% (6/60 rounds) in ")
    assert lines[-1].startswith("churn-and-loss: 100% (60/60 rounds)")


def test_progress_lines_carry_the_counts_and_a_failure_gets_a_line_of_its_own():
    stream = io.StringIO()
    progress = LineProgress(total=4, desc="sweep s", unit="run", stream=stream)
    progress.set_postfix(ran=1, failed=0)
    progress.update()
    progress.write("run s-0001 failed: ValueError: bad")
    progress.set_postfix(ran=1, failed=1)
    progress.update(3)
    first, failure, last = stream.getvalue().splitlines()
    assert failure == "run s-0001 failed: ValueError: bad"
    assert first.startswith("sweep s: 25% (1/4 run) in ") and first.endswith(" s, ran=1, failed=0")
    assert last.startswith("sweep s: 100% (4/4 run) in ") and last.endswith(" s, ran=1, failed=1")
