"""The wheel is the gateway alone: agent, gateway and plugins with their data files; no evals/, no tests/.

The wheel is built as pip builds it (an isolated build environment with pyproject's build
backend), from a copy of the checkout so no ``build/`` or ``*.egg-info`` is left in it. Where
pip cannot fetch the backend (offline, no index), the build tests are skipped and say so.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gateway import cli

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_PACKAGES = ("agent", "gateway", "plugins")
#: pip's words when it cannot get the build backend (no network, no index): a reason to skip, not a failure.
OFFLINE = (
    "No matching distribution found",
    "Could not find a version that satisfies",
    "Failed to establish",
    "Network is unreachable",
    "Temporary failure in name resolution",
)


def _copy_ignoring(directory: str, names: list[str]) -> set[str]:
    """Not copied: dot-directories (.venv, .git …), caches, build leftovers and the benchmarks' output."""
    ignored = {name for name in names if name.startswith(".") or name == "__pycache__" or name.endswith(".egg-info")}
    if Path(directory) == ROOT:
        ignored |= {"build", "dist"} & set(names)
    if Path(directory) == ROOT / "evals":
        ignored |= {"out"} & set(names)
    return ignored


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout as it is now, copied once: the wheel and what it is checked against are of one moment."""
    copy = tmp_path_factory.mktemp("source") / "foldgate"
    shutil.copytree(ROOT, copy, ignore=_copy_ignoring, symlinks=True)
    return copy


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # pip with the user's own configuration (the index it may use), which the suite's throwaway ~ hides.
    environment = {**os.environ, "HOME": pwd.getpwuid(os.getuid()).pw_dir}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            "--retries",
            "1",
            "--timeout",
            "15",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=environment,
    )
    if done.returncode != 0 and any(words in done.stdout + done.stderr for words in OFFLINE):
        pytest.skip(
            f"cannot build the wheel here: pip could not fetch the build backend (offline?): "
            f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}"
        )
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("foldgate-*.whl")
    return built


def _names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_the_wheel_holds_the_runtime_packages_and_neither_evals_nor_tests(wheel: Path) -> None:
    names = _names(wheel)
    top = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")}
    assert top == set(RUNTIME_PACKAGES)
    assert {"gateway/cli/__init__.py", "agent/loop.py", "plugins/__init__.py"} <= names
    (top_level,) = [name for name in names if name.endswith(".dist-info/top_level.txt")]
    with zipfile.ZipFile(wheel) as archive:
        assert set(archive.read(top_level).decode().split()) == set(RUNTIME_PACKAGES)


def test_the_wheel_holds_every_data_file_the_runtime_packages_read(wheel: Path, source: Path) -> None:
    """Every file beside the code (Lua scripts, YAML, JSON, JSONL …; only Markdown notes aside) ships."""
    data = {
        path.relative_to(source).as_posix()
        for package in RUNTIME_PACKAGES
        for path in (source / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".py", ".pyc", ".md")
    }
    assert "gateway/cli/starter_config.yaml" in data
    assert data - _names(wheel) == set()


def test_the_installed_wheel_says_bench_and_eval_run_from_a_checkout(wheel: Path, tmp_path: Path) -> None:
    """The wheel's own gateway.cli, with no site-packages (-S) and so none of this checkout on the path."""
    installed, elsewhere = tmp_path / "site", tmp_path / "cwd"
    elsewhere.mkdir()
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(installed)
    for argv, how in (
        (["bench", "compress"], "./dev bench NAME"),
        (["eval", "compaction", "--sessions", "s", "--probes", "p"], "./dev eval"),
    ):
        done = subprocess.run(
            [sys.executable, "-S", "-m", "gateway.cli", *argv],
            cwd=elsewhere,
            capture_output=True,
            text=True,
            timeout=60,
            env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 2
        assert done.stdout == ""
        (line,) = done.stderr.splitlines()
        assert "development checkout" in line and how in line


def test_bench_and_eval_are_still_listed_where_they_cannot_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "from_checkout", lambda: False)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = capsys.readouterr().out
    assert "    eval " in listed and "    bench " in listed
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    assert "./dev bench NAME" in capsys.readouterr().out


def test_this_checkout_is_one() -> None:
    assert cli.from_checkout()
