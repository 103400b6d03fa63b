"""Main of the py_test targets in tests/BUILD: runs pytest on the test files given as arguments, inside Bazel's
runfiles tree (which holds pyproject.toml, so pytest finds the project's configuration and tests/conftest.py)."""
from __future__ import annotations

import os
import sys

import pytest


def use_runfiles_packages() -> None:
    """Import sdconvert and sdlite from the py_library targets in the runfiles. An editable pip install of the project
    (scikit-build-core's redirecting finder, which Python consults before sys.path) would otherwise load the checkout
    it was installed from, which need not be this one, or may no longer exist. Child interpreters (tests that run
    `python -c ...`) inherit SKBUILD_EDITABLE_SKIP, with which the finder steps aside for the build it names."""
    finders = [f for f in sys.meta_path if "ScikitBuildRedirecting" in type(f).__name__]
    skip = [p for p in os.environ.get("SKBUILD_EDITABLE_SKIP", "").split(os.pathsep) if p]
    skip += [f.path for f in finders if getattr(f, "path", None)]
    if skip:
        os.environ["SKBUILD_EDITABLE_SKIP"] = os.pathsep.join(skip)
    sys.meta_path[:] = [f for f in sys.meta_path if f not in finders]


if __name__ == "__main__":
    use_runfiles_packages()
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
