"""`python -m benchmarks <name>`: run one benchmark, write JSON (+ PNG) under --out. Each
benchmark is a module with HELP, add_arguments(parser) and run(args, db) -> Path."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

from benchmarks.common import bench_database
from chronomem.paths import REPO_ROOT

BENCHMARKS = (
    "write",
    "ingest",
    "search",
    "locomo",
    "api",
    "closes",
    "communities",
    "peer",
    "extraction",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--out", type=Path, default=REPO_ROOT / "benchmarks" / "results",
        help="directory for the result files (default: benchmarks/results)",
    )  # fmt: skip
    common.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or None,
        help="superuser DSN of a PostgreSQL with pgvector, where chronomem_bench_<benchmark> "
        "is created and dropped (default: DATABASE_URL, else an embedded server in a temp dir)",
    )
    common.add_argument(
        "--keep-database", action="store_true",
        help="with --database-url: leave chronomem_bench_<benchmark> in place afterwards",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name in BENCHMARKS:
        module = importlib.import_module(f"benchmarks.{name}")
        p = sub.add_parser(name, parents=[common], help=module.HELP, description=module.HELP)
        module.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    print(f"benchmark {args.benchmark}: preparing the database", flush=True)
    with bench_database(args.benchmark, args.database_url, args.keep_database) as db:
        path = importlib.import_module(f"benchmarks.{args.benchmark}").run(args, db)
    print(f"wrote {path} in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
