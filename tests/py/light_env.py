"""Virtual environments holding only the light client (clients/python, the distribution
chronomem-client) and what a test adds to it: an agent framework, through one of the
client's extras or a pinned package. A script run there proves that the client
installs and works beside that framework with nothing of the server's environment (a
dependency clash fails the install, an import of server code fails the import).

`light_env(extras, packages)` builds such an environment once and returns its Python. A
test module names the one it needs as `LIGHT_ENV = LightEnv(...)`; tests/py/conftest.py
starts building those of the selected modules when collection ends, two at a time,
while the session's other tests run, so the first adapter test rarely waits for pip.
Environments are cached in .venv/light-envs/, keyed by the client's pyproject.toml, the
extras, the packages and this Python's version; the client's own source is installed
again (without its dependencies) whenever it changed. pip fetches the dependencies
from the package index; the client always comes from this repository."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
CACHE = ROOT / ".venv" / "light-envs"
# What a build of the client leaves in its folder: never part of its source.
_NOT_SOURCE = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "*.pyc")


def light_env(extras: Sequence[str] = (), packages: Sequence[str] = ()) -> Path:
    """The Python of a virtual environment holding `chronomem-client[extras]`, installed
    from this repository, and `packages` (pip requirement strings, e.g.
    "langgraph>=0.3,<0.4"), and nothing else but their dependencies."""
    return LightEnv(tuple(extras), tuple(packages)).python()


@dataclass(frozen=True)
class LightEnv:
    """A light environment a test module needs: `prebuild` starts building it in the
    background, `python` waits for it."""

    extras: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()

    def prebuild(self) -> Future[Path]:
        key = (tuple(sorted(self.extras)), self.packages)
        with _BUILDS_LOCK:
            if key not in _BUILDS:
                _BUILDS[key] = _BUILDER.submit(_light_env, *key)
            return _BUILDS[key]

    def python(self) -> Path:
        return self.prebuild().result()


# Two builds at a time: pip is mostly downloads and unpacking, and the machine has two
# cores that the rest of the suite uses too.
_BUILDER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="light-env")
_BUILDS: dict[tuple[tuple[str, ...], tuple[str, ...]], Future[Path]] = {}
_BUILDS_LOCK = threading.Lock()


def stop_builds() -> None:
    """Builds not started yet are dropped (the session ended without needing them)."""
    _BUILDER.shutdown(wait=False, cancel_futures=True)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a process in a light environment: none of the main
    environment's Python settings (PYTHONPATH, VIRTUAL_ENV, ...) leak into it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    return {**env, **extra}


def run_python(
    python: Path, script: str, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `script` (source text) with `python` in isolated mode (-I: no PYTHONPATH, no
    user site, not the current directory), from a temp directory."""
    with tempfile.TemporaryDirectory(prefix="chronomem-light-") as tmp:
        path = Path(tmp) / "script.py"
        path.write_text(script, encoding="utf-8")
        return subprocess.run(
            [str(python), "-I", str(path), *args],
            cwd=tmp,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def run_with_tenants(
    python: Path,
    script: str,
    name: str,
    model_url: str,
    api_url: str,
    app_dsn: str,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run an adapter's `script` against a live server, as a tenant beside a stranger
    (another org): its argv is the model's base URL, the API's, then the tenant's token
    and project and the stranger's token and project."""
    from api_server import make_tenant  # the main environment's: it writes through SQL

    tag = uuid.uuid4().hex[:8]
    tenant = make_tenant(app_dsn, f"{name} {tag}")
    stranger = make_tenant(app_dsn, f"{name} stranger {tag}")
    return run_python(
        python,
        script,
        model_url,
        api_url,
        tenant.token,
        str(tenant.project),
        stranger.token,
        str(stranger.project),
        timeout=timeout,
    )


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def _source_digest() -> str:
    files = sorted(
        p
        for p in CLIENT.rglob("*")
        if p.is_file()
        and not any(
            part in ("build", "dist", "__pycache__") or part.endswith(".egg-info")
            for part in p.relative_to(CLIENT).parts
        )
        and p.suffix != ".pyc"
    )
    return _digest(
        *(b for p in files for b in (str(p.relative_to(CLIENT)).encode(), p.read_bytes()))
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Held by one pytest session at a time (two sessions may share the cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _pip(python: Path, *args: str) -> None:
    result = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


@functools.cache
def _light_env(extras: tuple[str, ...], packages: tuple[str, ...]) -> Path:
    key = _digest(
        (CLIENT / "pyproject.toml").read_bytes(),
        ",".join(extras).encode(),
        "\n".join(packages).encode(),
        sys.version.encode(),
    )[:16]
    home = CACHE / key
    python = home / "bin" / "python"
    ready = home / ".chronomem-ready"
    installed = home / ".chronomem-client-source"
    with _locked(CACHE / f"{key}.lock"), tempfile.TemporaryDirectory() as tmp:
        source = _source_digest()
        # Built from a copy: an in-tree build would leave build/ in clients/python, whose
        # stale files a later build would install.
        copy = Path(tmp) / "chronomem-client"
        shutil.copytree(CLIENT, copy, ignore=_NOT_SOURCE)
        requirement = f"{copy}[{','.join(extras)}]" if extras else str(copy)
        if not ready.exists():
            shutil.rmtree(home, ignore_errors=True)  # a build that did not finish
            subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, timeout=300)
            _pip(python, "install", requirement, *packages)
            installed.write_text(source)
            ready.write_text(key)
        elif installed.read_text() != source:
            _pip(python, "install", "--no-deps", "--force-reinstall", str(copy))
            installed.write_text(source)
    return python
