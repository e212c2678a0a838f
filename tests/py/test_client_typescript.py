"""The TypeScript client (clients/typescript, the npm package chronomem-client) against a
real `chronomem serve`, with node and npm: its devDependencies install from the lockfile
(`npm ci`, skipped while node_modules matches package-lock.json); its generated types
(src/schema.ts) are what openapi-typescript makes of the live server's OpenAPI document,
with a positive control (a document without one route gives other types); it type-checks
under tsc --strict; its tests (clients/typescript/test/*.test.ts) pass under node's test
runner with the keys of two orgs; its Client has every method of the Python client's
Calls, with the same arguments; and, installed from the tarball `npm pack` makes, the
examples of its README and docs/integrations/typescript.md compile and run.

node and npm are required: without them the tests fail, they do not skip."""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import inspect
import json
import os
import re
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from api_server import make_tenant

from chronomem_client.client import Calls

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
SCHEMA = PACKAGE / "src" / "schema.ts"
STAMP = PACKAGE / "node_modules" / ".chronomem-installed"
REGENERATE = (
    "cd clients/typescript && npm run generate -- http://127.0.0.1:8765/openapi.json "
    "(with `chronomem serve` running), and commit src/schema.ts"
)
MIN_NODE = 20


def _run(
    args: Sequence[str], *, cwd: Path = PACKAGE, env: dict[str, str] | None = None, timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args),
        cwd=cwd,
        env={
            **os.environ,
            "npm_config_update_notifier": "false",
            "npm_config_fund": "false",
            "npm_config_audit": "false",
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _output(result: subprocess.CompletedProcess[str]) -> str:
    return f"$ {' '.join(result.args)}\n{result.stdout}\n{result.stderr}"


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """node_modules and dist/ are shared: one pytest session at a time builds and runs."""
    path = ROOT / ".venv" / "typescript-client.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _installed_digest() -> str:
    return hashlib.sha256(
        (PACKAGE / "package.json").read_bytes() + (PACKAGE / "package-lock.json").read_bytes()
    ).hexdigest()


@pytest.fixture(scope="module")
def package() -> Iterator[Path]:
    """clients/typescript with its devDependencies installed and its sources compiled
    into dist/ (a type error fails every test that needs it)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"{tool} is not on PATH: the TypeScript client's tests need node {MIN_NODE}+ "
                "and npm (CI has them)",
                pytrace=False,
            )
    version = _run(["node", "--version"], timeout=30).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < MIN_NODE:
        pytest.fail(f"node {version} is too old: the TypeScript client needs {MIN_NODE}+")
    with _locked():
        digest = _installed_digest()
        if not STAMP.exists() or STAMP.read_text() != digest:
            # npm ci removes node_modules first, the stamp with it.
            result = _run(["npm", "ci", "--ignore-scripts"], timeout=300)
            assert result.returncode == 0, _output(result)
            STAMP.write_text(digest)
        # tsc never deletes an output: a stale compiled test would run again.
        shutil.rmtree(PACKAGE / "dist", ignore_errors=True)
        built = _run(["npm", "run", "--silent", "build"], timeout=300)
        if built.returncode != 0:
            pytest.fail(f"tsc found errors:\n{_output(built)}", pytrace=False)
        yield PACKAGE


def _generate(source: str, output: Path) -> str:
    result = _run(["npm", "run", "--silent", "generate", "--", source, str(output)], timeout=120)
    assert result.returncode == 0, _output(result)
    return output.read_text(encoding="utf-8")


def test_the_generated_types_are_those_of_the_live_openapi_document(
    package: Path, light_api: str, tmp_path: Path
) -> None:
    committed = SCHEMA.read_text(encoding="utf-8")
    regenerated = _generate(f"{light_api}/openapi.json", tmp_path / "schema.ts")
    if regenerated != committed:
        diff = difflib.unified_diff(
            committed.splitlines(),
            regenerated.splitlines(),
            "src/schema.ts (committed)",
            "src/schema.ts (from the live /openapi.json)",
            lineterm="",
        )
        pytest.fail(
            "clients/typescript/src/schema.ts is out of date with the server's OpenAPI "
            f"document. Regenerate it: {REGENERATE}.\n" + "\n".join(list(diff)[:80]),
            pytrace=False,
        )


def test_the_drift_check_sees_a_route_removed(
    package: Path, light_api: str, tmp_path: Path
) -> None:
    """Positive control: the live document without one of its routes, from a file,
    gives other types (the route's are gone, the others' are there)."""
    document = httpx.get(f"{light_api}/openapi.json", timeout=10).json()
    committed = SCHEMA.read_text(encoding="utf-8")
    route = "/v1/projects/{project_id}/timeline"
    assert f'"{route}": {{' in committed
    del document["paths"][route]
    less = tmp_path / "less.json"
    less.write_text(json.dumps(document), encoding="utf-8")
    fewer = _generate(str(less), tmp_path / "less.ts")
    assert fewer != committed
    assert f'"{route}": {{' not in fewer and '"/v1/projects/{project_id}/facts": {' in fewer


def test_the_typescript_tests_pass_against_the_live_server(
    package: Path, light_api: str, app_dsn: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    tenant = make_tenant(app_dsn, f"typescript {tag}")
    stranger = make_tenant(app_dsn, f"typescript stranger {tag}")
    files = sorted(str(p.relative_to(package)) for p in (package / "dist" / "test").glob("*.js"))
    assert files, "tsc compiled no test"  # positive control
    result = _run(
        ["node", "--test", "--test-reporter=tap", *files],
        env={
            "CHRONOMEM_TEST_BASE_URL": light_api,
            "CHRONOMEM_TEST_TOKEN": tenant.token,
            "CHRONOMEM_TEST_STRANGER_TOKEN": stranger.token,
        },
        timeout=180,
    )
    assert result.returncode == 0, _output(result)
    counts = dict(re.findall(r"^# (tests|pass|fail) (\d+)$", result.stdout, re.M))
    assert counts.get("fail") == "0" and int(counts.get("pass", 0)) >= 10, _output(result)
    assert counts["pass"] == counts["tests"], _output(result)


# The methods of src/client.ts's Client, read with the TypeScript compiler's parser:
# {name: {"positional": [parameter names], "options": [keys of its options object]}}.
_METHODS = """
import { readFileSync } from "node:fs";
import ts from "typescript";
const path = "src/client.ts";
const source = ts.createSourceFile(path, readFileSync(path, "utf8"), ts.ScriptTarget.ES2022, true);
const methods = {};
for (const node of source.statements) {
  if (!ts.isClassDeclaration(node) || node.name?.text !== "Client") continue;
  for (const member of node.members) {
    // #call and #send are PrivateIdentifiers, not methods of the API.
    if (!ts.isMethodDeclaration(member) || !ts.isIdentifier(member.name)) continue;
    const method = { positional: [], options: [] };
    for (const p of member.parameters) {
      const name = p.name.getText(source);
      if (name === "options" && p.type && ts.isTypeLiteralNode(p.type)) {
        method.options = p.type.members.map((m) => m.name.getText(source)).sort();
      } else {
        method.positional.push(name);
      }
    }
    methods[member.name.text] = method;
  }
}
console.log(JSON.stringify(methods));
"""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _python_methods() -> dict[str, dict[str, list[str]]]:
    # Client.metrics and Client.attachment_content answer text and bytes, not a Call.
    methods = {
        "metrics": {"positional": [], "options": []},
        "attachmentContent": {"positional": ["project", "attachment"], "options": []},
    }
    for name, function in inspect.getmembers(Calls, inspect.isfunction):
        if name.startswith("_"):
            continue
        parameters = list(inspect.signature(function).parameters.values())[1:]  # self
        methods[_camel(name)] = {
            "positional": [_camel(p.name) for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD],
            "options": sorted(_camel(p.name) for p in parameters if p.kind is p.KEYWORD_ONLY),
        }
    return methods


def test_the_client_has_every_method_of_the_python_client(package: Path) -> None:
    result = _run(["node", "--input-type=module", "-e", _METHODS], timeout=60)
    assert result.returncode == 0, _output(result)
    typescript = json.loads(result.stdout)
    python = _python_methods()
    assert sorted(set(python) - set(typescript)) == [], "in the Python client only"
    assert sorted(set(typescript) - set(python)) == [], "in the TypeScript client only"
    for name, expected in python.items():
        assert typescript[name] == expected, name
    # Positive controls: both sides were read, keyword arguments included.
    assert len(python) >= 35, sorted(python)
    assert typescript["listFacts"]["options"] == sorted(
        ["asOf", "knownAt", "subject", "predicate", "cursor", "limit"]
    )
    assert _camel("list_api_keys") == "listApiKeys"


def _example(page: Path) -> str:
    blocks = re.findall(r"```ts\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(blocks) == 1, (page, blocks)  # positive control: the example was found
    return blocks[0]


def test_the_examples_run_from_the_packed_package(
    package: Path, light_api: str, app_dsn: str, tmp_path: Path
) -> None:
    """An application that installed the tarball `npm pack` makes (its `files` and
    `exports`) compiles each example under tsc --strict and runs it."""
    packed = _run(
        ["npm", "pack", "--silent", "--ignore-scripts", "--pack-destination", str(tmp_path)],
        timeout=120,
    )
    assert packed.returncode == 0, _output(packed)
    app = tmp_path / "app"
    installed = app / "node_modules" / "chronomem-client"
    with tarfile.open(tmp_path / packed.stdout.strip().splitlines()[-1]) as tarball:
        tarball.extractall(tmp_path / "unpacked", filter="data")
    installed.parent.mkdir(parents=True)
    (tmp_path / "unpacked" / "package").rename(installed)
    assert not (installed / "dist" / "test").exists()  # only the library is packed
    (app / "node_modules" / "@types").symlink_to(package / "node_modules" / "@types")
    (app / "package.json").write_text('{"type": "module", "private": true}\n')
    (app / "tsconfig.json").write_text(
        json.dumps(
            {
                "compilerOptions": {
                    "target": "ES2022",
                    "lib": ["ES2022"],
                    "types": ["node"],
                    "module": "NodeNext",
                    "moduleResolution": "NodeNext",
                    "strict": True,
                    "outDir": "out",
                },
                "include": ["*.ts"],
            }
        )
    )
    pages = {
        "readme": PACKAGE / "README.md",
        "docs": ROOT / "docs" / "integrations" / "typescript.md",
    }
    for name, page in pages.items():
        (app / f"{name}.ts").write_text(_example(page).replace("http://127.0.0.1:8765", light_api))
    tsc = package / "node_modules" / "typescript" / "bin" / "tsc"
    compiled = _run(["node", str(tsc), "-p", "."], cwd=app, timeout=120)
    assert compiled.returncode == 0, _output(compiled)
    for name in pages:
        tenant = make_tenant(app_dsn, f"typescript {name} {uuid.uuid4().hex[:8]}")
        ran = _run(
            ["node", f"out/{name}.js"],
            cwd=app,
            env={"CHRONOMEM_API_KEY": tenant.token},
            timeout=60,
        )
        assert ran.returncode == 0, _output(ran)
        lines = ran.stdout.splitlines()
        assert lines[0] == "pro basic" and lines[-1] == "404 not_found", _output(ran)
