"""Issue 22's cases (`trust_cases.py`: a key named as a trace, /dev/zero, a named pipe, `--set` 5,000 deep, damaged
runs, loose keys...), each run in-process on this code: refused in one line on stderr with exit status 2, or
accepted as documented, with no traceback and no secret shown; and docs/trust.md's table is the one
`trust_table.py` writes from the saved outcomes (a figure in the docs is never copied by hand)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from experiments.cli import main
from tests.experiments import trust_table
from tests.experiments.trust_cases import CASES, set_up, what_a_user_sees

ROOT = Path(__file__).resolve().parents[2]


def quotalab(argv: list[str]) -> None:
    """A set-up's command, in-process: it must succeed."""
    assert main(argv) == 0, argv


@pytest.mark.parametrize("name", list(CASES))
def test_each_case_ends_as_the_docs_say(name, tmp_path, monkeypatch, capsys, no_spark):
    case = CASES[name]
    monkeypatch.chdir(tmp_path)
    set_up(case, tmp_path, quotalab)
    capsys.readouterr()
    umask = os.umask(case.umask) if case.umask is not None else None
    try:
        status = main(list(case.argv))
    finally:
        if umask is not None:
            os.umask(umask)
    out, err = capsys.readouterr()
    seen = what_a_user_sees(case, tmp_path, status, out, err)
    assert seen["exit"] == case.status, seen
    assert not seen["traceback"] and not seen["java_stack_lines"] and not seen["secret_shown"], seen
    if case.status:
        assert seen["stderr_lines"] == 1 and seen["first_line"].startswith(f"quotalab {case.argv[0]}: "), seen
    assert len(seen["warnings"]) == case.warns, seen
    for written, mode in seen.get("modes", {}).items():  # no key others may read, no file others may replace
        assert int(mode, 8) & (0o077 if written.endswith(".key") else 0o022) == 0, seen["modes"]


def test_the_docs_table_is_the_one_written_from_the_saved_outcomes():
    assert trust_table.table() in (ROOT / "docs" / "trust.md").read_text()
