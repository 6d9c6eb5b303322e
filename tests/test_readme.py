"""Every command the README shows runs as written (on the CPU here; the Python example on a GPU), and the README
stays a user's page: at most 350 lines, no commit hash outside the results table's provenance."""

import os
import re
import shlex
import subprocess
import sys

import pytest
import torch

from lab.env import ROOT

README = (ROOT / "README.md").read_text()
MAX_LINES = 350


def code_blocks(lang: str = "") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def shown_commands() -> list[str]:
    """Shell commands of the README: the lines of its plain code blocks (comments dropped) and inline code that
    starts with a command, each split at `&&`."""
    lines = [line.split("#")[0].strip() for block in code_blocks() for line in block.splitlines()]
    inline = re.findall(r"`((?:python|softmax-lab|bash|pip) [^`]+)`", README)
    commands = [part.strip() for line in [*lines, *inline] if line for part in line.split("&&")]
    return [c for c in dict.fromkeys(commands) if c.split()[0] in ("python", "softmax-lab", "bash", "pip")]


# Commands the suite runs elsewhere: build.sh and pytest are .ci/run itself, `python -m lab.test` is
# tests/test_operators.py's run of the softmax operator, the package install tests/test_package.py's.
ELSEWHERE = {"bash build.sh", "python -m pytest", "python -m lab.test", "pip install --no-build-isolation -e ."}


def run(command: str, tmp_path) -> subprocess.CompletedProcess:
    args = shlex.split(command)
    if args[0] == "softmax-lab":  # the console script, as pip installs it: lab.test's main under that name
        args = [sys.executable, "-c", "import sys; sys.argv[0] = 'softmax-lab'; from lab.test import main; "
                "sys.exit(main())", *args[1:]]
    elif args[0] == "python":
        args = [sys.executable, *args[1:]]
    args = [a.replace("/tmp/plots", str(tmp_path / "plots")) for a in args]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_the_readme_is_a_users_page():
    assert len(README.splitlines()) <= MAX_LINES
    hashes = [line for line in README.splitlines() if re.search(r"\b[0-9a-f]{7,40}\b", line)
              and not line.startswith("| H")]  # the results table's rows name the commit of each run
    assert not hashes, hashes


@pytest.mark.skipif(torch.cuda.is_available(), reason="the commands' CPU runs (on a GPU, `python -m lab.test` is the "
                    "full lab: scripts/remote/gpu.sh lab runs it)")
@pytest.mark.parametrize("command", [c for c in shown_commands() if c not in ELSEWHERE])
def test_every_command_shown_runs(command, tmp_path):
    if "--explain" in command:
        pytest.importorskip("lab._C", reason="--explain needs the built extension")
    proc = run(command, tmp_path)
    assert proc.returncode == 0, f"{command}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stdout + proc.stderr


def test_the_commands_shown_are_the_ones_tested():
    """A command added to the README is run by the test above, or is one of those run elsewhere."""
    assert set(shown_commands()) >= ELSEWHERE, "the README's two commands and the install are shown"
    assert len(shown_commands()) > len(ELSEWHERE)


@pytest.mark.gpu
def test_the_python_example_runs(tmp_path):
    (block,) = code_blocks("python")
    script = tmp_path / "example.py"
    script.write_text(block + "\ny2 = f(x.detach().requires_grad_())\ny2.backward(torch.randn_like(y2))\n"
                      "torch.testing.assert_close(y2, torch.softmax(x.detach().float(), -1).to(x.dtype))\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert torch.cuda.is_available()
