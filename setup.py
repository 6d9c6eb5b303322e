"""Builds the CUDA extension lab._C from csrc/ (every csrc/**/*.cu and csrc/*.cpp, globbed).

Target architecture: CUDA_ARCH (sm_90 style, comma-separated) or else TORCH_CUDA_ARCH_LIST (9.0
style, which torch's build helpers read themselves); with neither, sm_90 (the H200). DEBUG=1 builds
device code with -G. No GPU is needed to build, only a CUDA build of torch and nvcc.
"""

import os
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / "csrc"


def arch_flags() -> list[str]:
    archs = os.environ.get("CUDA_ARCH", "").strip()
    if not archs and os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return []  # torch.utils.cpp_extension turns TORCH_CUDA_ARCH_LIST into -gencode flags
    flags = []
    for arch in (archs or "sm_90").split(","):
        cc = arch.strip().removeprefix("sm_").removeprefix("compute_")
        if not cc.isalnum():
            raise SystemExit(f"CUDA_ARCH: cannot read {arch!r}; expected e.g. sm_90 or sm_90,sm_100")
        flags.append(f"-gencode=arch=compute_{cc},code=sm_{cc}")
    return flags


def torch_libstdcxx() -> list[str]:
    """The shared libstdc++ that torch runs with, to link against by path.

    A compiler driver may link libstdc++ statically (the H200 machines set CXX to a g++ wrapper
    whose library path holds only libstdc++.a). lab._C then carries a private copy of the C++
    streams next to torch's shared one, and the first error message that formats a number mixes
    the two copies' locale objects and segfaults. Naming torch's own libstdc++.so on the link line
    binds every C++ symbol to it before the driver's static archive is searched.
    """
    import torch  # noqa: F401  loads libstdc++ into this process

    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "/libstdc++.so" in line})
    except OSError:  # not Linux: the platform's default linking applies
        return []
    return paths[:1]


def extension():
    from torch.utils.cpp_extension import CUDAExtension

    debug = os.environ.get("DEBUG") == "1"
    sources = sorted(str(p.relative_to(ROOT)) for p in CSRC.rglob("*.cu")) + sorted(
        str(p.relative_to(ROOT)) for p in CSRC.glob("*.cpp")
    )
    host_opt = ["-O0", "-g"] if debug else ["-O3"]
    nvcc = ["-std=c++17", "-lineinfo", "-Xptxas=-warn-spills", *arch_flags()]
    nvcc += ["-G", "-g", "-O0"] if debug else ["-O3"]
    if not (os.environ.get("CUDA_ARCH") or os.environ.get("TORCH_CUDA_ARCH_LIST")):
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"  # keep torch from probing for a GPU to pick one
    return CUDAExtension(
        name="lab._C",
        sources=sources,
        include_dirs=[str(CSRC / "include")],
        extra_compile_args={"cxx": [*host_opt, "-std=c++17", "-DPy_LIMITED_API=0x030A0000"], "nvcc": nvcc},
        extra_link_args=torch_libstdcxx(),
        py_limited_api=True,
    )


if __name__ == "__main__":
    from torch.utils.cpp_extension import BuildExtension

    setup(
        name="softmax-lab-ext",
        ext_modules=[extension()],
        cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
        options={"bdist_wheel": {"py_limited_api": "cp310"}},
    )
