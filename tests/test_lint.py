"""The Python sources are ruff-clean under the rules in pyproject.toml (skipped where ruff is not
installed, as on the offline GPU machines; build.sh installs it where it can)."""

import importlib.util
import subprocess
import sys

import pytest

from lab.env import ROOT


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed")
def test_ruff_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
