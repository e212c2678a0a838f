"""`chronomem up --no-serve` end to end, on a fresh embedded data dir, twice."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from testdb import embedded_data_dir

from chronomem import embedded

pytestmark = pytest.mark.smoke

# A psql table's header rule ("-----" or "----+----") or its row count footer.
PSQL_TABLE = re.compile(r"^-+(\+-+)*$|^\(\d+ rows?\)$", re.MULTILINE)


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("chronomem")
    return [str(script)] if script.exists() else [sys.executable, "-m", "chronomem"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # this test is about the embedded server
    return env


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with embedded_data_dir() as path:
        yield path
        subprocess.run([*_cli(), "down", "--data-dir", str(path)], env=_env(), check=False)


def _sized_shared_buffers() -> int:
    return embedded.size_memory(embedded.machine_memory()).shared_buffers


def _shown(mib: int) -> str:
    """A size in MiB as PostgreSQL's SHOW prints it."""
    return f"{mib // 1024}GB" if mib % 1024 == 0 else f"{mib}MB"


def _up(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_cli(), "up", "--no-serve", "--data-dir", str(data_dir)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_up_twice_on_a_fresh_data_dir(data_dir: Path) -> None:
    # The second run attaches to the running server: bootstrap and migrate are no-ops.
    for run in ("first", "second"):
        result = _up(data_dir)
        output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        assert result.returncode == 0, f"{run} `chronomem up` failed\n{output}"
        assert PSQL_TABLE.search(result.stdout), f"{run} run printed no psql table\n{output}"
        # The new data dir was given its share of memory (test_embedded_memory.py).
        assert f"shared_buffers {_shown(_sized_shared_buffers())}" in result.stdout, (
            f"{run} run did not report the sized shared_buffers\n{output}"
        )
        assert "made before chronomem sized" not in result.stdout, output


def test_up_on_a_data_dir_made_before_sizing_says_how_to_size_it(data_dir: Path) -> None:
    # A data dir whose server ran with PostgreSQL's defaults (as before sizing): `up`
    # keeps them and prints what to run. The control is the test above: a sized data
    # dir gets no hint.
    embedded.start(data_dir / "pg")
    assert embedded.stop(data_dir / "pg")
    result = _up(data_dir)
    output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == 0, output
    assert "shared_buffers 128MB" in result.stdout, output
    wanted = _sized_shared_buffers()
    hint = f"alter system set shared_buffers = '{wanted}MB'"
    assert (hint in result.stdout) == (wanted > 128), output
