"""`python -m benchmarks <name>`: run one benchmark, write JSON (+ PNG) under --out.

Each benchmark is a module of this package exposing

    HELP: str
    add_arguments(parser: argparse.ArgumentParser) -> None
    run(args: argparse.Namespace, db: BenchDatabase) -> Path   # the JSON it wrote

so adding `ingest`, `search`, `locomo` or `api` is one module and one line below.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path
from types import ModuleType

from benchmarks.common import bench_database
from chronomem.paths import REPO_ROOT

# name -> module; imported only when its subcommand is built, so a benchmark with
# heavy optional dependencies does not slow the others down.
BENCHMARKS: dict[str, str] = {
    "write": "benchmarks.write",
    "ingest": "benchmarks.ingest",
    "locomo": "benchmarks.locomo",
    "search": "benchmarks.search",
    "api": "benchmarks.api",
    "closes": "benchmarks.closes",
    "communities": "benchmarks.communities",
}


def _load(name: str) -> ModuleType:
    return importlib.import_module(BENCHMARKS[name])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "benchmarks" / "results",
        help="directory for the result files (default: benchmarks/results)",
    )
    common.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or None,
        help="superuser DSN of a PostgreSQL 15+ with pgvector; a database "
        "chronomem_bench_<benchmark> is created there and dropped afterwards (default: "
        "DATABASE_URL, else a throwaway embedded server in a temp dir)",
    )
    common.add_argument(
        "--keep-database",
        action="store_true",
        help="with --database-url: leave chronomem_bench_<benchmark> in place afterwards (to "
        "inspect it)",
    )
    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name in BENCHMARKS:
        module = _load(name)
        p = sub.add_parser(name, parents=[common], help=module.HELP, description=module.HELP)
        module.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    print(f"benchmark {args.benchmark}: preparing the database", flush=True)
    reuse = bool(getattr(args, "reuse", False))  # a benchmark's own option (search)
    with bench_database(
        args.benchmark, args.database_url, keep=args.keep_database, reuse=reuse
    ) as db:
        path = _load(args.benchmark).run(args, db)
    print(f"wrote {path} in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
