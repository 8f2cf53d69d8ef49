"""The `statecert` command: the main job, `inspect`, and one-line errors (ERR-1, ERR-2)."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from statecert.spec import errors

GOLDEN = Path(__file__).resolve().parent.parent / "scenarios" / "golden" / "v1-savepoint"


def statecert(*args: str, tmpdir: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the command line, with `tmpdir` as its temporary directory when given."""
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir is not None else None
    return subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", *args], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.mark.requirement("ERR-1")
def test_every_documented_error_is_a_statecert_error() -> None:
    documented = [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
    assert len(documented) >= 12
    for cls in documented:
        assert issubclass(cls, errors.StateCertError), f"{cls.__name__} is not a StateCertError"


def test_demo_job_runs_and_verifies(tmp_path: Path) -> None:
    result = statecert("demo", "--records", "20000", "--checkpoint-dir", str(tmp_path), "--rescale-to", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: 20000 records" in result.stdout and "restored at 3" in result.stdout
    assert (tmp_path / "checkpoints").is_dir() and any((tmp_path / "savepoints").iterdir())


def test_demo_without_a_checkpoint_dir_says_which_temporary_directory_it_kept(tmp_path: Path) -> None:
    result = statecert("demo", "--records", "2000", tmpdir=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    kept = [line for line in result.stdout.splitlines() if line.startswith("kept in ")]
    assert len(kept) == 1, f"expected one 'kept in' line, got {result.stdout!r}"
    directory = Path(kept[0].removeprefix("kept in ").split(":", 1)[0])
    assert directory.parent == tmp_path and any((directory / "savepoints").iterdir()), kept[0]
    savepoint = kept[0].split("statecert inspect ", 1)[1].split("`", 1)[0]
    assert statecert("inspect", savepoint).returncode == 0, savepoint


def test_inspect_prints_operators_and_handles(tmp_path: Path) -> None:
    result = statecert("inspect", str(GOLDEN))
    assert result.returncode == 0, result.stderr
    assert "format version 1" in result.stdout and "[64, 127]" in result.stdout
    machine = json.loads(statecert("inspect", "--json", str(GOLDEN / "_metadata")).stdout)
    assert machine["format_version"] == 1 and machine["checkpoint_id"] == 7
    subtasks = machine["operators"][0]["subtasks"]
    assert [h["key_groups"] for s in subtasks for h in s["handles"] if h["type"] == "key-groups"] == [
        [0, 63],
        [64, 127],
    ]
    assert {h["stream"]["kind"] for s in subtasks for h in s["handles"]} == {"file", "inline"}


@pytest.mark.requirement("ERR-2")
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"PK\x03\x04 a zip file, not a checkpoint", "not a statecert _metadata file"),
        (b"SCMD", "truncated"),
        (b"SCMD\x00\x00\x00\x63rest", "unknown _metadata format version 99"),
    ],
)
def test_bad_file_is_one_line_naming_file_and_problem(tmp_path: Path, content: bytes, problem: str) -> None:
    bad = tmp_path / "_metadata"
    bad.write_bytes(content)
    result = statecert("inspect", str(bad))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got: {result.stderr}"
    assert lines[0].startswith("statecert: error: ") and str(bad) in lines[0] and problem in lines[0], lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.requirement("ERR-2")
@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--parallelism", "0"], "argument --parallelism: must lie in 1..32768, got 0"),
        (["--parallelism", "-1"], "argument --parallelism: must lie in 1..32768, got -1"),
        (["--records", "-5"], "argument --records: must lie in 1..100000000, got -5"),
        (["--records", "ten"], "argument --records: expected an integer, got 'ten'"),
        (["--rescale-to", "0"], "argument --rescale-to: must lie in 1..32768, got 0"),
        (["--parallelism", "200"], "argument --parallelism: 200 exceeds --max-parallelism 128"),
        (["--max-parallelism", "40000"], "argument --max-parallelism: must lie in 1..32768, got 40000"),
        (["--checkpoint-dir", "nosuchproto://x"], "nosuchproto"),
        (["--checkpoint-dir", "/dev/null/x"], "argument --checkpoint-dir: /dev/null is not a directory, so"),
        (["--checkpoint-dir", "file:///dev/null"], "argument --checkpoint-dir: /dev/null is not a directory"),
    ],
)
def test_bad_demo_values_are_one_line(tmp_path: Path, args: list[str], problem: str) -> None:
    """ERR-2: a bad command-line value is one line naming the option, exit status 2, nothing run or left behind."""
    result = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "demo", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stdout + result.stderr
    assert lines[0].startswith("statecert: error: ") and problem in lines[0], lines[0]
    assert "OK" not in result.stdout and list(tmp_path.iterdir()) == []


@pytest.mark.requirement("ERR-2")
def test_a_standalone_master_nobody_answers_at_is_one_line_before_spark_starts(tmp_path: Path) -> None:
    """`--master spark://HOST:PORT` where nothing listens: one line naming --master and why, exit status 2, no JVM
    (Spark retried for a minute, printed 130 lines of Java logs and said only that its context had stopped)."""
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    scenario = Path(__file__).resolve().parent.parent / "scenarios" / "library" / "savepoint-and-resume.toml"
    master = f"spark://127.0.0.1:{port}"
    result = statecert("scenario", "run", str(scenario), "--runner", "spark", "--master", master, tmpdir=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stdout + result.stderr
    assert lines[0].startswith(f"statecert: error: --master {master!r}: no Spark master accepts connections"), lines
    assert f"127.0.0.1:{port}: " in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == [], "nothing is left in the temporary directory"


@pytest.mark.requirement("ERR-2")
def test_incomplete_checkpoint_is_reported(tmp_path: Path) -> None:
    (tmp_path / "chk-1").mkdir()
    result = statecert("inspect", str(tmp_path / "chk-1"))
    assert result.returncode == 2 and "incomplete checkpoint" in result.stderr and "chk-1" in result.stderr


@pytest.mark.requirement("ERR-2")
def test_unknown_backend_name_is_one_line(tmp_path: Path) -> None:
    result = statecert("demo", "--backend", "nonesuch", "--records", "10", "--checkpoint-dir", str(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("statecert: error: unknown state backend 'nonesuch': "), lines
    assert "hashmap" in lines[0], "the message should list the known names"


RAISING_FACTORY = "def factory(config):\n    raise RuntimeError('the factory is broken')\n"
SCENARIO_LIBRARY = Path(__file__).resolve().parent.parent / "scenarios"


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stdout + result.stderr
    assert lines[0].startswith("statecert: error: "), lines[0]
    return lines[0]


@pytest.mark.requirement("ERR-2")
@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["certify", ""], "argument backend"),
        (["certify", " "], "argument backend"),
        (["certify", "--storage-under-test", ""], "argument --storage-under-test"),
        (["scenario", "run", "sum-by-split", "--backend", ""], "argument --backend"),
        (["demo", "--backend", "", "--records", "10"], "argument --backend"),
    ],
)
def test_an_empty_backend_name_is_refused_not_read_as_the_default(tmp_path: Path, args: list[str], option: str) -> None:
    """A backend or storage named by an empty string (an unset shell variable, say) is a bad value: reading it as
    "not given" certified, or ran, the default heap backend under that name."""
    result = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    line = _one_line_error(result)
    assert option in line and "expected an entry-point name or module:attr" in line, line
    assert "CERTIFIED" not in result.stdout and list(tmp_path.iterdir()) == []


@pytest.mark.requirement("ERR-2")
def test_an_empty_backend_in_pyproject_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.statecert]\nbackend = ""\n', encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "certify"], cwd=tmp_path, capture_output=True, text=True
    )
    line = _one_line_error(result)
    assert "[tool.statecert] backend: expected a state backend" in line, line


@pytest.mark.requirement("ERR-2")
@pytest.mark.parametrize(
    "command",
    ["certify", "certify-storage", "demo", "scenario-option", "scenario-file", "simulate-file"],
)
def test_a_backend_factory_that_raises_is_one_line_naming_where(tmp_path: Path, command: str) -> None:
    """The loader lets a factory's own exception propagate (LD-5); the command line reports it as one line with the
    exception and the line that raised it, exit status 2, before anything runs and with nothing left behind."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "broken_factory.py").write_text(RAISING_FACTORY, encoding="utf-8")
    scenario = (SCENARIO_LIBRARY / "library" / "incremental-chain.toml").read_text(encoding="utf-8")
    (work / "scenario.toml").write_text(scenario.replace('"rocksdb"', '"broken_factory:factory"'), encoding="utf-8")
    job = (SCENARIO_LIBRARY / "simulator" / "crash-aligned.toml").read_text(encoding="utf-8")
    (work / "job.toml").write_text(job.replace('"hashmap"', '"broken_factory:factory"'), encoding="utf-8")
    args = {
        "certify": ["certify", "broken_factory:factory"],
        "certify-storage": ["certify", "--storage-under-test", "broken_factory:factory"],
        "demo": ["demo", "--backend", "broken_factory:factory", "--records", "10"],
        "scenario-option": ["scenario", "run", "sum-by-split", "--backend", "broken_factory:factory"],
        "scenario-file": ["scenario", "run", "scenario.toml"],
        "simulate-file": ["simulate", "job.toml"],
    }[command]
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "TMPDIR": str(temporary), "PYTHONPATH": str(work)}
    result = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", *args], cwd=work, capture_output=True, text=True, env=env
    )
    line = _one_line_error(result)
    assert "RuntimeError: the factory is broken" in line and "broken_factory.py:2" in line, line
    left = sorted(p.name for p in work.iterdir() if p.name != "__pycache__")
    assert left == ["broken_factory.py", "job.toml", "scenario.toml"], f"{command} left {left} in its directory"
    assert list(temporary.iterdir()) == [], f"{command} left {list(temporary.iterdir())} behind"


@pytest.mark.requirement("ERR-2")
@pytest.mark.parametrize(
    ("path", "problem"),
    [("", "argument path: expected a path or an fsspec URL, got ''"), ("nosuchproto://x", "no file system for")],
)
def test_a_path_inspect_cannot_open_is_one_line(tmp_path: Path, path: str, problem: str) -> None:
    """An empty path was read as the working directory, and a URL whose file system package is missing (s3fs for
    `s3://`) ended in an ImportError traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "statecert.cli.main", "inspect", path], cwd=tmp_path, capture_output=True, text=True
    )
    line = _one_line_error(result)
    assert problem in line, line


def test_output_checks_accept_what_can_be_written_and_name_what_cannot(tmp_path: Path) -> None:
    """The checks run before a command's work (ERR-2): an existing report is overwritten, missing directories are
    made later; a file under a regular file, a directory named as the file, and a directory that is a file are not."""
    from statecert.cli.arguments import output_file_problem, work_directory

    (tmp_path / "report.json").write_text("{}")
    (tmp_path / "file").write_text("")
    assert output_file_problem(str(tmp_path / "report.json")) is None
    assert output_file_problem(str(tmp_path / "new" / "deeper" / "report.json")) is None
    assert work_directory(str(tmp_path)) == str(tmp_path)
    assert work_directory(str(tmp_path / "new" / "dir")) == str(tmp_path / "new" / "dir")
    assert output_file_problem(str(tmp_path)) == f"{tmp_path} is a directory; name the file in it"
    assert output_file_problem(str(tmp_path / "file" / "r.json")) == (
        f"{tmp_path / 'file'} is not a directory, so {tmp_path / 'file' / 'r.json'} cannot be created"
    )
    with pytest.raises(argparse.ArgumentTypeError, match="is not a directory"):
        work_directory(str(tmp_path / "file"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "report.json"], "a check created something"
