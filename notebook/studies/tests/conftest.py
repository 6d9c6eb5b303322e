"""The suite's own set-up for the studies' tests (run from the checkout's root: `python -m pytest
notebook/studies/tests`): the Triton interpreter without a GPU, and the `gpu` marker (tests/conftest.py)."""

from tests.conftest import HAS_GPU, pytest_collection_modifyitems  # noqa: F401
