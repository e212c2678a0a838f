"""The embedded server's memory: sized once, when its data directory is created."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
from testdb import embedded_data_dir

from chronomem import embedded

GIB = 1024**3
SIZED = ("shared_buffers", "effective_cache_size", "maintenance_work_mem")


def _bytes(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "select name, pg_size_bytes(current_setting(name)) from unnest(%s::text[]) name",
            (list(SIZED),),
        ).fetchall()
    return dict(rows)


def _wanted() -> dict[str, int]:
    wanted = embedded.size_memory(embedded.machine_memory()).as_settings()
    return {name: int(value.removesuffix("MB")) * embedded.MIB for name, value in wanted.items()}


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with embedded_data_dir() as path:
        yield path / "pg"
        embedded.stop(path / "pg")


@pytest.mark.parametrize(
    ("total_gib", "shared", "cache", "maintenance"),
    [
        (0.5, 128, 256, 64),  # small machine: never below PostgreSQL's own default
        (24, 3072, 12288, 1024),
        (256, 4096, 131072, 1024),  # big machine: shared with the rest, capped
    ],
)
def test_size_memory(total_gib: float, shared: int, cache: int, maintenance: int) -> None:
    sized = embedded.size_memory(int(total_gib * GIB))
    assert (sized.shared_buffers, sized.effective_cache_size, sized.maintenance_work_mem) == (
        shared,
        cache,
        maintenance,
    )


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"memory.max": "2147483648\n"}, 2 * GIB),  # cgroup v2 with a limit
        ({"memory/memory.limit_in_bytes": "1073741824\n"}, GIB),  # cgroup v1
        ({"memory.max": "max\n"}, None),  # v2, no limit: the machine's memory
        ({"memory/memory.limit_in_bytes": str(2**63 - 4096)}, None),  # v1, no limit
        ({}, None),  # no cgroup files at all
    ],
)
def test_machine_memory_reads_a_container_limit(
    tmp_path: Path, files: dict[str, str], expected: int | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert embedded.machine_memory(tmp_path) == (expected or physical)


def test_a_new_data_dir_is_sized_and_an_existing_one_keeps_its_settings(data_dir: Path) -> None:
    server = embedded.start(data_dir, sized=True)
    dsn = embedded.superuser_dsn(server)
    assert _bytes(dsn) == _wanted()

    # The user's choice wins: set by hand, kept across a restart with sized=True.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("alter system set shared_buffers = '200MB'")
    assert embedded.stop(data_dir)
    embedded.start(data_dir, sized=True)
    assert _bytes(embedded.superuser_dsn(server))["shared_buffers"] == 200 * embedded.MIB


def test_unsized_start_keeps_postgresql_defaults(data_dir: Path) -> None:
    # The control: without sized=True nothing is changed (what the test fixtures use).
    server = embedded.start(data_dir)
    assert _bytes(embedded.superuser_dsn(server))["shared_buffers"] == 128 * embedded.MIB


def test_cleanup_after_the_sizing_restart_stops_the_new_server() -> None:
    # The restart replaces the postmaster; the handle must follow it, or its cleanup
    # would delete the data directory under a server that still runs.
    with embedded_data_dir() as path:
        server = embedded.start(path / "pg", cleanup_mode="delete", sized=True)
        pid = server.get_pid()
        assert pid is not None and psutil.pid_exists(pid)
        server.cleanup()
        assert not (path / "pg").exists()
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).wait(10)
        assert not psutil.pid_exists(pid)


def test_settings_the_os_refuses_are_undone(data_dir: Path) -> None:
    # 4 TB of shared buffers: the OS refuses the mapping, the server must still come up
    # (with its defaults), and a later start must not fail on the stored setting.
    server = embedded.start(data_dir)
    too_big = embedded.MemorySettings(
        shared_buffers=4 * 1024 * 1024, effective_cache_size=4096, maintenance_work_mem=64
    )
    with pytest.warns(UserWarning, match="did not start"):
        assert not embedded.apply_memory_settings(server, data_dir, too_big)
    assert _bytes(embedded.superuser_dsn(server))["shared_buffers"] == 128 * embedded.MIB
    assert embedded.stop(data_dir)
    embedded.start(data_dir)
    assert _bytes(embedded.superuser_dsn(server))["shared_buffers"] == 128 * embedded.MIB
    # The control: settings it can take are applied by the same call.
    assert embedded.apply_memory_settings(server, data_dir, embedded.size_memory(2 * GIB))
    assert _bytes(embedded.superuser_dsn(server))["shared_buffers"] == 256 * embedded.MIB
