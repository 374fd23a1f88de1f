#!/usr/bin/env bash
# Create .venv (if missing) and install fuseforge into it.
#
# CPU machines: installs the pinned versions of constraints.txt from the package index.
# GPU machines (no network, torch with CUDA already installed): the venv sees the system's packages
# and fuseforge is installed without downloading anything.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV"
    "$PY" -m venv --system-site-packages "$VENV"
fi
VPY="$VENV/bin/python"
stamp="$VENV/.fuseforge-installed"
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt constraints.txt ]; then
    exit 0
fi

if "$VPY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() or torch.version.cuda else 1)" 2>/dev/null; then
    # A CUDA build of torch is already there (GPU machine): reuse everything installed, download nothing.
    echo "setup: using the installed torch $("$VPY" -c 'import torch; print(torch.__version__)') (offline install)"
    "$VPY" -m pip install -q --no-deps --no-build-isolation --no-index -e . 
else
    if ! "$VPY" -c "import torch" 2>/dev/null; then
        echo "setup: installing torch (CPU build) first"
        "$VPY" -m pip install -q -c constraints.txt torch
    fi
    echo "setup: installing fuseforge and its dev dependencies"
    "$VPY" -m pip install -q -c constraints.txt -e ".[dev]"
fi
touch "$stamp"
