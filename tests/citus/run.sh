#!/usr/bin/env bash
# The project's SQL-level suites against a distributed database (tests/citus/README.md):
# the pgTAP files, the cross-tenant function probes, the temporal property tests and
# the worker's suites, through a Citus coordinator.
#
#   tests/citus/run.sh [COORDINATOR_DSN] [pytest arguments]
#
# COORDINATOR_DSN: a superuser on the coordinator's maintenance database, whose
# metadata names the workers (default: tests/citus/cluster.sh dsn). The suites' test
# database is made on every node, migrated and distributed (tests/citus/citus_provision.py).
# Prints a line per test file; the JUnit report is $CITUS_RESULTS/junit.xml
# (default /tmp/citus-results).
set -euo pipefail
cd "$(dirname "$0")/../.."

DSN=${1:-$(tests/citus/cluster.sh dsn)}
[ $# -gt 0 ] && shift
RESULTS=${CITUS_RESULTS:-/tmp/citus-results}
mkdir -p "$RESULTS"

SUITES=(
  tests/sql
  tests/py/test_cross_tenant_functions.py
  tests/py/test_known_at_replay.py
  tests/py/test_state_machine_property.py
  # The worker against the cluster: claims, extraction with the scripted model,
  # embeddings, webhook delivery and its caps per org and endpoint.
  tests/py/test_worker.py
  tests/py/test_webhooks.py
  tests/py/test_webhook_fairness.py
)

set +e
DATABASE_URL=$DSN PYTHONPATH="tests/citus${PYTHONPATH:+:$PYTHONPATH}" \
  .venv/bin/python -m pytest -p citus_provision -p no:cacheprovider -q --tb=line \
  --junitxml="$RESULTS/junit.xml" "${SUITES[@]}" "$@" >"$RESULTS/pytest.log" 2>&1
status=$?
set -e
tail -3 "$RESULTS/pytest.log"
.venv/bin/python tests/citus/summary.py "$RESULTS/junit.xml"
exit $status
