"""`python -m fuseforge.check MODEL.py CANDIDATE.py [options]`: see fuseforge/check/cli.py."""

from fuseforge.check.cli import standalone

standalone()(prog_name="python -m fuseforge.check")
