"""The docs say what the code does: every relative link and anchor in README.md and
docs/ resolves; docs/operations.md names exactly the CHRONOMEM_* variables the code
reads; docs/mcp.md lists exactly the tools the MCP server registers; docs/http.md lists
every route the API serves; README.md stays short and starts with the two commands.
Each check has a positive control, so a parser that finds nothing fails too. No
database is needed."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CODE_DIRS = ("chronomem", "thin_api", "workers")
# The pages written by hand (not the generated reference, not the decision records).
HAND_WRITTEN = [README, *sorted(p for p in DOCS.glob("*.md") if p.name != "sql-reference.md")]

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_VARIABLE = re.compile(r"\b(?:CHRONOMEM_[A-Z0-9_]+|DATABASE_URL)")


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code removed."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, _INLINE_CODE.sub("", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m is None:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            found.append((number, target))
    return found


def broken_link(source: Path, target: str) -> str | None:
    """Why `target` (a relative link in `source`) does not resolve, or None."""
    file_part, _, anchor = target.partition("#")
    dest = (source.parent / file_part).resolve() if file_part else source
    if not dest.exists():
        return f"{file_part} does not exist"
    if anchor:
        if dest.is_dir() or dest.suffix != ".md":
            return f"an anchor into {file_part}, which is not a markdown page"
        if anchor not in anchors(dest):
            return f"no heading in {dest.name} has the anchor #{anchor}"
    return None


def test_every_relative_link_resolves() -> None:
    problems, checked, anchored = [], 0, 0
    for path in markdown_files():
        for number, target in relative_links(path):
            checked += 1
            anchored += "#" in target
            if (why := broken_link(path, target)) is not None:
                problems.append(f"{path.relative_to(ROOT)}:{number}: ({target}) {why}")
    assert not problems, "\n".join(problems)
    # Positive controls: the parser finds the links the pages hold.
    assert checked >= 80, checked
    assert anchored >= 15, anchored


def test_link_checker_finds_broken_links(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n## Two words\n\n[ok](#two-words) [file](page.md#a-page) "
        "[gone](missing.md) [bad anchor](#nowhere) `[not a link](missing.md)`\n"
        "```\n[in code](missing.md)\n```\n",
        encoding="utf-8",
    )
    links = [target for _, target in relative_links(page)]
    assert links == ["#two-words", "page.md#a-page", "missing.md", "#nowhere"]
    assert [broken_link(page, t) is None for t in links] == [True, True, False, False]
    assert slug("Status, metrics and health") == "status-metrics-and-health"
    assert slug("Another PostgreSQL: DATABASE_URL") == "another-postgresql-database_url"


def variables_in(text: str) -> set[str]:
    # A name ending in "_" is a family written as a prefix (CHRONOMEM_LLM_*), not a variable.
    return {v for v in _VARIABLE.findall(text) if not v.endswith("_")}


def code_variables() -> set[str]:
    names: set[str] = set()
    for directory in CODE_DIRS:
        for path in (ROOT / directory).rglob("*.py"):
            names |= variables_in(path.read_text(encoding="utf-8"))
    return names


def test_operations_names_every_setting_the_code_reads() -> None:
    code = code_variables()
    documented = variables_in((DOCS / "operations.md").read_text(encoding="utf-8"))
    missing, unread = code - documented, documented - code
    assert not missing, f"read by the code, not in docs/operations.md: {sorted(missing)}"
    assert not unread, f"in docs/operations.md, read by no code: {sorted(unread)}"
    # Positive controls: both sides found the settings.
    assert len(code) >= 25, sorted(code)
    assert {"DATABASE_URL", "CHRONOMEM_LLM_BASE_URL", "CHRONOMEM_API_MAX_BODY_BYTES"} <= code
    assert variables_in("CHRONOMEM_LLM_* and CHRONOMEM_X_Y, DATABASE_URL") == {
        "CHRONOMEM_X_Y",
        "DATABASE_URL",
    }


def registered_tools() -> set[str]:
    from thin_api.mcp_server import Backend, build_server

    def no_database() -> NoReturn:
        raise AssertionError("listing the tools needs no database")

    server = build_server(Backend(get_db=no_database, get_embedder=lambda: None))
    return {tool.name for tool in asyncio.run(server.list_tools())}


def section(path: Path, heading: str) -> str:
    """The text under `## heading`, up to the next heading of that level or above."""
    text = path.read_text(encoding="utf-8")
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^#{{1,2}} |\Z)", text, re.M | re.S)
    assert m, f"{path.name} has no section '## {heading}'"
    return m.group(1)


def test_mcp_docs_list_every_registered_tool() -> None:
    tools = registered_tools()
    rows = re.findall(r"^\| `([a-z_]+)` \|", section(DOCS / "mcp.md", "Tools"), re.M)
    documented = set(rows)
    assert not tools - documented, f"registered, not in docs/mcp.md: {tools - documented}"
    assert not documented - tools, f"in docs/mcp.md, not registered: {documented - tools}"
    assert len(rows) == len(documented), "a tool is listed twice"
    assert len(tools) >= 10, sorted(tools)  # positive control


def documented_routes() -> set[tuple[str, str]]:
    routes = set()
    for methods, path in re.findall(
        r"^\| ([A-Z, ]+) \| `([^`]+)` \|", section(DOCS / "http.md", "Routes"), re.M
    ):
        path = path.replace("…", "/v1/projects/{id}")
        for method in methods.split(","):
            routes.add((method.strip(), path))
    return routes


def served_routes() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(the OpenAPI document's operations, every route the app answers) with the project
    parameter written {id}, as the docs write it."""
    from thin_api.app import create_app

    app = create_app(dsn="postgresql://unused")

    def norm(path: str) -> str:
        return path.replace("{project_id}", "{id}")

    documented = {
        (method.upper(), norm(path))
        for path, item in app.openapi()["paths"].items()
        for method in item
    }
    every = set(documented)
    for route in app.router.routes:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None) or ()
        if isinstance(path, str):
            every |= {(m, norm(path)) for m in methods if m != "HEAD"}
    return documented, every


def test_http_docs_list_every_route() -> None:
    docs = documented_routes()
    openapi, every = served_routes()
    assert not openapi - docs, f"served, not in docs/http.md: {sorted(openapi - docs)}"
    assert not docs - every, f"in docs/http.md, not served: {sorted(docs - every)}"
    assert len(openapi) >= 30, sorted(openapi)  # positive controls
    assert ("POST", "/v1/projects/{id}/facts") in docs
    assert ("POST", "/mcp") in docs & every


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220, f"README.md has {len(lines)} lines (at most about 200)"
    assert len(lines) >= 60, len(lines)  # positive control: the file was read
    assert lines[0].startswith("# "), lines[0]
    rest = iter(lines[1:])
    line = next(rest)
    while not line.strip():
        line = next(rest)
    paragraph = []
    while line.strip():
        paragraph.append(line)
        line = next(rest)
    assert paragraph and not paragraph[0].startswith(("#", "```", "|", "-")), paragraph
    while not line.strip():
        line = next(rest)
    assert line.startswith("```"), f"after the first paragraph comes {line!r}"
    assert next(rest).startswith("./scripts/up")
    following = next(rest)
    while following.lstrip().startswith("#"):  # the first command's comment continues
        following = next(rest)
    assert following.startswith("./scripts/test"), following


def test_hand_written_pages_carry_no_history_or_old_names() -> None:
    """History lives in git; the renamed HTTP functions live in memory_http."""
    patterns = [
        r"memory\.api_",
        r"\bsince migration\b",
        r"\bbefore migration\b",
        r"\bmigration 00\d\d\b",
        r"\bused to\b",
    ]
    problems = []
    for path in HAND_WRITTEN:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            problems += [
                f"{path.relative_to(ROOT)}:{number}: {p}" for p in patterns if re.search(p, line)
            ]
    assert not problems, "\n".join(problems)
    assert len(HAND_WRITTEN) >= 8, HAND_WRITTEN  # positive control
