#!/usr/bin/env bash
# One command for a machine where this checkout is not installed (a lent GPU machine with no network):
# install the carried wheels (gpu/site.sh) and run `bench acceptance` with the arguments given.
#   bash gpu/acceptance.sh --out outputs/acceptance --budget-s 480
# Environment: PYTHON, WHEELS, SITE (gpu/site.sh), BENCH_GIT_COMMIT (the commit the rows record where there is
# no .git). `--install-only` installs and checks the imports, then stops (the test suite's rehearsal).
set -uo pipefail
cd "$(dirname "$0")/.."
source gpu/site.sh || exit 3

if [ "${1:-}" = "--install-only" ]; then exit 0; fi
exec "$PY" -m bench_core acceptance "$@"
