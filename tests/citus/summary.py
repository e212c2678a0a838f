"""One line per test file of a JUnit report: passed, failed, and the first error's gist.

`python tests/citus/summary.py junit.xml` (tests/citus/run.sh prints it).
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict


def _gist(message: str) -> str:
    """The error a failure ended with, without the ids and values that vary."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    database = [m.group(1) for ln in lines if (m := re.search(r"psycopg\.errors\.\w+: (.*)", ln))]
    errors = [ln for ln in lines if re.search(r"(Error|ERROR|error|not ok)\b", ln)]
    text = (database or errors[-1:] or lines[-1:] or [""])[0]
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<id>", text)
    return text[:160]


def main(path: str) -> None:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    first: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("classname") or case.get("file") or "?"
        source = name.split("::")[0]
        outcome = "passed"
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                outcome = "failed"
                first.setdefault(
                    source, _gist((node.get("message") or "") + "\n" + (node.text or ""))
                )
        if case.find("skipped") is not None:
            outcome = "skipped"
        counts[source][outcome] += 1
    width = max((len(s) for s in counts), default=10)
    for source in sorted(counts):
        c = counts[source]
        line = f"{source:<{width}}  {c['passed']:>4} passed {c['failed']:>4} failed"
        if c["skipped"]:
            line += f" {c['skipped']:>3} skipped"
        if source in first:
            line += f"  | {first[source]}"
        print(line)
    total = sum(counts.values(), Counter())
    print(f"total: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")


if __name__ == "__main__":
    main(sys.argv[1])
