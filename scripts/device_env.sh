#!/usr/bin/env bash
# On a GPU machine: make ../shared point at the carried copy (.shared) when the real one is absent,
# and set up .venv from the machine's own packages (no network there).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -e ../shared ] && [ -d .shared ]; then ln -s "$PWD/.shared" ../shared; fi
make setup >/dev/null
