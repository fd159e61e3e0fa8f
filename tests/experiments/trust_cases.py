"""What a careless file, a hostile input or a damaged run does to `quotalab`: issue 22's cases, as commands.

Each case writes its files in a fresh folder (a scenario, a key, a trace, a run directory damaged on purpose) and
runs one `quotalab` command there. `test_trust_cases.py` runs each in-process on this code and checks the exit
status it documents (`Case.status`): refused in one line with status 2, or accepted; no traceback, no secret.

Run as a module, this records what a user sees, for docs/trust.md's table of before and after: each command runs
as `python -m experiments ...` on the code of `--code` (default: this checkout), and the exit status (or
`timeout`), the number of lines on stderr, whether a Python traceback or a Java stack shows, the first line,
whether a secret the case planted shows anywhere, the peak RSS of the command, and for `quotalab keys` the modes
of what it wrote are saved. A trace of /dev/zero runs under a 4 GiB address-space limit (it must not take the
shared machine's memory), a named pipe under a 30 s timeout (it must not hang), the others under `--timeout-s`.

Run from the repository root: `python -m tests.experiments.trust_cases` (writes `tests/results/trust.json`);
`--code /tmp/before --out tests/results/trust-before.json` for the code before issue 22 (a worktree of commit
915f03d). `python -m tests.experiments.trust_table` turns both, and the Ray measurements, into docs/trust.md's
table.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import ROOT, command_line, environment, load_since, loadavg_1m, results_path, save_results

RESULTS = results_path("trust", "tests")
MEMORY_LIMIT_BYTES = 4 * 2**30
SECRET = "SECRET-123"

SCENARIO = """\
name: trust
rounds: {rounds}
backend: local
groups:
  - {{name: g, quota: {{publish_msgs_per_s: 100}}}}
brokers:
  - {{name: b1, workload: [{{group: g, msgs_per_s: {rate}}}]}}
  - {{name: b2, workload: [{{group: g, msgs_per_s: 40}}]}}
{extra}"""


def scenario(extra: str = "", rate: str = "80", rounds: int = 12) -> str:
    return SCENARIO.format(extra=extra, rate=rate, rounds=rounds)


Quotalab = Callable[[list[str]], None]  # runs `quotalab ARGV` in the case's folder; raises if it fails


@dataclass(frozen=True)
class Case:
    item: int  # the item
    what: str
    argv: list[str]  # after `python -m experiments`
    files: dict[str, str | bytes] = field(default_factory=dict)  # written mode 0600 in the case's folder
    modes: dict[str, int] = field(default_factory=dict)
    prepare: Callable[[Path, Quotalab], None] | None = None  # (folder, a way to run quotalab) -> more set-up
    umask: int | None = None
    written: str = ""  # a folder whose modes are recorded (quotalab keys)
    memory_limit: bool = False  # under MEMORY_LIMIT_BYTES of address space (not Spark's JVM: it reserves more)
    timeout_s: float | None = None  # instead of --timeout-s (a case that may hang)
    status: int = 2  # the exit status this code gives: 2 refused in one line, 0 accepted
    warns: bool = False  # accepted with one warning


# --- damaged runs (item 5) ---------------------------------------------------------------------------------------


def corrupt_pages(part: Path) -> None:
    """The second half of every column chunk of `part` inverted, its footer intact: the file opens, its pages
    do not decode to what was written."""
    damaged = bytearray(part.read_bytes())
    metadata = pq.read_metadata(part)
    for index in range(metadata.row_group(0).num_columns):
        chunk = metadata.row_group(0).column(index)
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        end = start + chunk.total_compressed_size
        for position in range((chunk.data_page_offset + end) // 2, end):
            damaged[position] ^= 0xFF
    part.write_bytes(bytes(damaged))


def store_as(part: Path, column: str, stored: pa.DataType) -> None:
    """`part` rewritten with `column` cast to `stored` (a `round` stored as strings)."""
    table = pq.read_table(part)
    index = table.schema.get_field_index(column)
    pq.write_table(table.set_column(index, column, table.column(column).cast(stored)), part)


def damaged_run(damage: Callable[[Path], None]) -> Callable[[Path, Quotalab], None]:
    """A set-up that writes a 12-round run in `run/` with the code under test, then damages it."""

    def prepare(folder: Path, quotalab: Quotalab) -> None:
        (folder / "tiny.yaml").write_text(scenario())
        quotalab(["run", "tiny.yaml", "--out", "run"])
        damage(folder / "run")

    return prepare


def _every_rounds_part(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "rounds").glob("*.parquet"))


def _make_fifo(folder: Path, quotalab: Quotalab) -> None:
    os.mkfifo(folder / "day.csv")


def _write_big_trace(folder: Path, quotalab: Quotalab) -> None:
    """1,000,000 rows `round,msgs_per_s` (the rate is the round, to 12 decimals): 25 MiB, over a trace's 16 MiB."""
    lines = "".join(f"{r},{r}.000000000000\n" for r in range(1_000_000))
    (folder / "day.csv").write_text("round,msgs_per_s\n" + lines)


def _key_directory(key_mode: int, directory_mode: int) -> Callable[[Path, Quotalab], None]:
    """A set-up that writes keys for b1 and b2 with `quotalab keys`, then loosens b1.key's and the folder's modes."""

    def prepare(folder: Path, quotalab: Quotalab) -> None:
        quotalab(["keys", "--out", "keys", "--brokers", "b1", "b2"])
        (folder / "keys" / "b1.key").chmod(key_mode)
        (folder / "keys").chmod(directory_mode)

    return prepare


def _deep_set() -> str:
    return "name=" + "[" * 5000 + "]" * 5000


RUN = ["run", "trust.yaml", "--out", "out"]
REPORT = ["report", "run", "--master", "local[1]", "--out", "report"]
TRACE = "{trace: day.csv}"

CASES: dict[str, Case] = {
    "cluster key: the run says what it allows": Case(
        2,
        "a run signed with the shared HMAC key",
        RUN,
        {"trust.yaml": scenario("reporting: {hmac_key_file: cluster.key}"), "cluster.key": SECRET + "\n"},
        status=0,
        warns=True,
    ),
    "trace names a key file": Case(
        3,
        "`msgs_per_s: {trace: cluster.key}`",
        RUN,
        {"trust.yaml": scenario(rate="{trace: cluster.key}"), "cluster.key": SECRET + "\n"},
    ),
    "scenario is a key file": Case(3, "`quotalab run cluster.key`", ["run", "cluster.key"], {"cluster.key": SECRET}),
    "trace of /dev/zero": Case(
        3, "`msgs_per_s: {trace: /dev/zero}`", RUN, {"trust.yaml": scenario(rate="{trace: /dev/zero}")},
        memory_limit=True,
    ),
    "trace is a FIFO": Case(
        3, "`{trace: day.csv}`, day.csv a named pipe", RUN, {"trust.yaml": scenario(rate=TRACE)}, prepare=_make_fifo,
        timeout_s=30,
    ),
    "trace of 20 MB": Case(
        3, "a 1,000,000-line trace (20 MB)", RUN, {"trust.yaml": scenario(rate=TRACE, rounds=3)},
        prepare=_write_big_trace,
    ),
    "--set 5,000 levels deep": Case(
        4, "`--set name=[[[...]]]` 5,000 deep", ["run", "trust.yaml", "--set", _deep_set()], {"trust.yaml": scenario()}
    ),
    "threshold_pct 1e308": Case(
        4, "`reporting: {threshold_pct: 1e308}`", RUN, {"trust.yaml": scenario("reporting: {threshold_pct: 1e308}")}
    ),
    "report: corrupted data pages": Case(
        5, "rounds/part-00000: data pages inverted, footer intact", REPORT,
        prepare=damaged_run(lambda run: corrupt_pages(_every_rounds_part(run)[0])),
    ),
    "report: round stored as strings": Case(
        5, "rounds/part-00001's `round` column stored as strings", REPORT,
        prepare=damaged_run(lambda run: store_as(_every_rounds_part(run)[-1], "round", pa.string())),
    ),
    "report: rounds parts deleted": Case(
        5, "every rounds/ part deleted (manifest: 12 rounds completed)", REPORT,
        prepare=damaged_run(lambda run: [part.unlink() for part in _every_rounds_part(run)]),
    ),
    "keys under umask 000": Case(
        7, "`quotalab keys --out keys --brokers b1` with umask 000", ["keys", "--out", "keys", "--brokers", "b1"],
        umask=0, written="keys", status=0,
    ),
    "a key others may read": Case(
        7, "key_dir holding b1.key mode 0644", RUN, {"trust.yaml": scenario("reporting: {key_dir: keys}")},
        prepare=_key_directory(0o644, 0o700),
    ),
    "a key folder others may write in": Case(
        7, "key_dir mode 0777", RUN, {"trust.yaml": scenario("reporting: {key_dir: keys}")},
        prepare=_key_directory(0o600, 0o777),
    ),
}  # fmt: skip


def set_up(case: Case, folder: Path, quotalab: Quotalab) -> None:
    """Write the files of `case` in `folder` and run its set-up (its `quotalab` commands through `quotalab`)."""
    for name, content in case.files.items():
        path = folder / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        path.chmod(case.modes.get(name, 0o600))
    if case.prepare is not None:
        case.prepare(folder, quotalab)


def what_a_user_sees(case: Case, folder: Path, status: int | str, stdout: str, stderr: str) -> dict[str, Any]:
    """The command's exit `status` and output, as docs/trust.md's table describes them; for a case that writes
    files, their modes."""
    lines = stderr.splitlines()
    seen = {
        "exit": status,
        "stderr_lines": len(lines),
        "traceback": "Traceback" in stderr,
        "java_stack_lines": sum(line.lstrip().startswith("at ") for line in lines),
        "first_line": (lines[0] if lines else "")[:240],
        "warnings": [line[:240] for line in lines if "warning:" in line],
        "secret_shown": SECRET in stdout + stderr,
    }
    if case.written:
        seen["modes"] = _modes(folder / case.written)
    return seen


def run_case(case: Case, code: Path, timeout_s: float) -> dict[str, Any]:
    """Run `case` in a process of its own on the code of `code`: what a user sees, the time and peak RSS."""
    folder = Path(tempfile.mkdtemp(prefix="quotalab-trust-"))
    try:
        env = {**os.environ, "PYTHONPATH": str(code), "RAY_ADDRESS": ""}

        def quotalab(argv: list[str]) -> None:
            command = [sys.executable, "-m", "experiments", *argv]
            subprocess.run(command, cwd=folder, env=env, check=True, capture_output=True)

        set_up(case, folder, quotalab)
        return _measure(case, folder, env, timeout_s)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _measure(case: Case, folder: Path, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    def limits() -> None:
        if case.memory_limit:
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
        if case.umask is not None:
            os.umask(case.umask)

    started = time.monotonic()
    with open(folder / ".stdout", "w+") as out, open(folder / ".stderr", "w+") as err:
        command = [sys.executable, "-m", "experiments", *case.argv]
        process = subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=err, preexec_fn=limits)
        status, usage, timed_out = _wait(process, case.timeout_s or timeout_s)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    exit_status = "timeout" if timed_out else os.waitstatus_to_exitcode(status)
    return {
        **what_a_user_sees(case, folder, exit_status, stdout, stderr),
        "seconds": round(time.monotonic() - started, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
    }


def _wait(process: subprocess.Popen, timeout_s: float) -> tuple[int, resource.struct_rusage, bool]:
    """Wait for `process` (killed after `timeout_s`); its status, its resource usage, whether it timed out."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return status, usage, False
        if time.monotonic() > deadline:
            process.kill()
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = -9
            return status, usage, True
        time.sleep(0.05)


def _modes(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    modes = {f"{path.name}/": f"{stat.S_IMODE(path.stat().st_mode):04o}"}
    modes.update({child.name: f"{stat.S_IMODE(child.stat().st_mode):04o}" for child in sorted(path.iterdir())})
    return modes


def run(code: Path = ROOT, timeout_s: float = 120.0, only: list[str] | None = None) -> dict[str, Any]:
    load = loadavg_1m()
    cases = {name: case for name, case in CASES.items() if not only or name in only}
    results = {}
    for name, case in cases.items():
        results[name] = {
            "item": case.item,
            "what": case.what,
            "command": _shown(case.argv),
            **run_case(case, code, timeout_s),
        }
        print(f"{name}: exit {results[name]['exit']}, {results[name]['stderr_lines']} lines", flush=True)
    return {"code": str(code), "cases": results, "loadavg_1m": load_since(load), **environment("pyarrow")}


def _shown(argv: list[str]) -> str:
    words = [word if len(word) <= 40 else f"{word[:20]}...({len(word)} characters)" for word in argv]
    return "quotalab " + " ".join(words)


if __name__ == "__main__":
    parser = command_line(__doc__)
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code the commands run")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the results")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="a command still running is killed then")
    parser.add_argument("--only", nargs="+", metavar="CASE", help="these cases only (the others kept from --out)")
    args = parser.parse_args()
    result = run(args.code.resolve(), args.timeout_s, args.only)
    if args.only and args.out.exists():  # the other cases as measured before
        result["cases"] = {**json.loads(args.out.read_text())["cases"], **result["cases"]}
    save_results(args.out.resolve(), result, f"load {result['loadavg_1m']}", announce=False)
    print(f"saved {args.out}")
