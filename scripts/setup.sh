#!/usr/bin/env bash
# Create .venv (if missing) and install fuseforge into it.
#
# GPU machines (no network, a CUDA build of torch installed system-wide): the venv sees the system's
# packages and fuseforge is installed without downloading anything.
# CPU machines: the pinned versions of constraints.txt come from the package index.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}

system_has_cuda_torch() {
    "$PY" -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null
}

if system_has_cuda_torch; then
    # A venv made elsewhere (or without the system's packages) cannot see the installed torch: remake it.
    if [ -f "$VENV/pyvenv.cfg" ] && ! grep -q "include-system-site-packages = true" "$VENV/pyvenv.cfg"; then
        echo "setup: $VENV does not see the system's torch; recreating it"
        rm -rf "$VENV"
    fi
fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV"
    "$PY" -m venv --system-site-packages "$VENV"
fi
VPY="$VENV/bin/python"
if system_has_cuda_torch; then
    # python3 may itself live in a venv, whose packages a child venv does not inherit: point at them.
    site=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    vsite=$("$VPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    echo "$site" > "$vsite/_system_packages.pth"
fi
stamp="$VENV/.fuseforge-installed"
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ] && [ "$stamp" -nt constraints.txt ]; then
    exit 0
fi

if system_has_cuda_torch; then
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
