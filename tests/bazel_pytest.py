"""Main of the py_test targets in tests/BUILD: runs pytest on the test files given as arguments, inside Bazel's
runfiles tree (which holds pyproject.toml, so pytest finds the project's configuration and tests/conftest.py)."""
from __future__ import annotations

import sys

import pytest

if __name__ == "__main__":
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
