"""`python -m fuseforge.evaluate MODEL.py CANDIDATE.py --out DIR`: see fuseforge/evaluate/cli.py."""

import sys

from fuseforge.evaluate.cli import main

sys.exit(main())
