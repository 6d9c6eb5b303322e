"""The repository's scripts as modules, for their tests (scripts/ is not a package: each runs as a file)."""

import importlib.util
import sys
from types import ModuleType

from lab import resources


def load(path: str) -> ModuleType:
    """The script at `path` (relative to the repository root) imported as a module named after its file, and
    registered under that name (so that dataclasses and pickling inside it can find it)."""
    name = path.rsplit("/", 1)[-1].removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, resources.ROOT / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
