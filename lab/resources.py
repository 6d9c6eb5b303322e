"""Per-kernel resource report of the CUDA sources, compiled for sm_90 without a GPU.

Each variant's source, csrc/<operator>/<variant>.cu, is compiled alone by nvcc with `-Xptxas -v`, its device code
only (`-cubin`: the host code's compile adds nothing to the report and took a third of the time);
ptxas reports, per kernel, registers, shared memory, stack frame and spill bytes. A kernel that
spills fails the gate (tests/test_cuda_compile.py), and `python -m lab.test --resources` prints the
table. A source's report is kept under build/resources/, keyed by everything that decides it (nvcc's version,
the flags, every file under csrc/): compiling the same sources again (the test suite asks twice, a user
asks again) costs nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
ARCH = "sm_90"
CACHE = ROOT / "build" / "resources"


class CompileError(RuntimeError):
    pass


@dataclass(frozen=True)
class KernelResources:
    source: str
    kernel: str
    registers: int
    shared_bytes: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0

    def as_dict(self) -> dict:
        return asdict(self)


def cuda_home() -> str:
    """The CUDA toolkit's folder, as build.sh finds it: CUDA_HOME, else /usr/local/cuda, else nvcc's."""
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return "/usr/local/cuda"
    nvcc = find_nvcc()
    return str(Path(nvcc).resolve().parent.parent) if nvcc else ""


def find_nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
    )


_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")  # after the barriers, and after the stack size where there is one


def demangle(names: list[str]) -> list[str]:
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if not tool or not names:
        return names
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return out if len(out) == len(names) else names


def parse_ptxas(text: str, source: str) -> list[KernelResources]:
    """Parse `nvcc -Xptxas -v` output into one record per kernel."""
    records: list[dict] = []
    props_of = None  # the function whose "Function properties" block is being read
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            records.append({"kernel": m.group(1)})
        elif m := _PROPS.search(line):
            props_of = m.group(1)
        elif records and props_of == records[-1]["kernel"] and (m := _FRAME.search(line)):
            # ptxas also prints properties for non-inlined __device__ functions: only the
            # kernel's own block describes the kernel.
            records[-1].update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
        elif records and (m := _USED.search(line)):
            smem = _SMEM.search(line)
            records[-1].update(regs=int(m.group(1)), smem=int(smem.group(1)) if smem else 0)
    names = demangle([r["kernel"] for r in records])
    return [
        KernelResources(source, name, r.get("regs", 0), r.get("smem", 0), r.get("stack", 0),
                        r.get("spill_st", 0), r.get("spill_ld", 0))
        for name, r in zip(names, records, strict=True)
    ]


def compile_report(source: Path, extra_flags: tuple[str, ...] = ()) -> list[KernelResources]:
    """Compile one .cu for ARCH (no GPU needed) and return its kernels' resources: a source under csrc/ from
    the cache where it was compiled before from the same files with the same nvcc and flags."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise CompileError("nvcc not found (set CUDA_HOME)")
    cmd = [nvcc, "-std=c++17", f"-arch={ARCH}", "-O3", "-Xptxas", "-v", f"-I{CSRC / 'include'}", *extra_flags]
    try:
        name = str(source.relative_to(ROOT))
    except ValueError:
        name = source.name
    cached = _cache_path(cmd, source)
    if cached is not None and cached.exists():
        return [KernelResources(**k) for k in json.loads(cached.read_text())]
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([*cmd, "-cubin", str(source), "-o", str(Path(tmp) / "k.cubin")], capture_output=True,
                              text=True)
    if proc.returncode != 0:
        raise CompileError(f"{source.name} failed to compile:\n{proc.stderr.strip()}")
    kernels = parse_ptxas(proc.stderr + proc.stdout, name)
    if cached is not None:
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.part")  # whole or absent: another process may read it
            partial.write_text(json.dumps([k.as_dict() for k in kernels]))
            partial.replace(cached)
        except OSError:  # a read-only install: no cache, the report stands
            pass
    return kernels


def _cache_path(cmd: list[str], source: Path) -> Path | None:
    """Where the report of `source` compiled by `cmd` is kept, or None for a source outside csrc/ (a test's)."""
    if not source.resolve().is_relative_to(CSRC.resolve()):
        return None
    key = hashlib.sha256("\0".join([_nvcc_version(cmd[0]), *cmd[1:], str(source.relative_to(CSRC))]).encode())
    key.update(_csrc_digest())
    return CACHE / f"{key.hexdigest()[:32]}.json"


@functools.cache
def _nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout


def _csrc_digest() -> bytes:
    """Every file under csrc/ (a source includes headers, and headers include each other), by name and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in CSRC.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(CSRC)).encode() + b"\0" + path.read_bytes())
    return digest.digest()


def short_name(kernel: str) -> str:
    """A demangled kernel name without its return type and parameter list (the last top-level
    parenthesized group; "(anonymous namespace)" inside the name is kept)."""
    name = kernel.removeprefix("void ").strip()
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                return name[:i]
    return name


def cuda_sources() -> list[Path]:
    """Every CUDA variant's source: csrc/<operator>/<variant>.cu (not the operators' other sources, in
    subfolders, which hold no kernels)."""
    return sorted(p for d in CSRC.iterdir() if d.is_dir() and d.name != "include" for p in d.glob("*.cu"))


def report_all() -> list[KernelResources]:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        reports = list(pool.map(compile_report, cuda_sources()))
    return [k for r in reports for k in r]
