"""pytest_test: pytest files of //tests as one py_test (main: tests/bazel_pytest.py)."""

def pytest_test(name, tests, data, env = {}, size = "medium", pytest_args = []):
    """pytest_args: extra pytest arguments, e.g. ["-k", "'a or b'"] (Bazel splits each like a shell) to run part of a file."""
    native.py_test(
        name = name,
        size = size,
        srcs = ["bazel_pytest.py"] + tests,
        args = pytest_args + ["$(rootpath %s)" % t for t in tests],
        data = data,
        env = env,
        # No generated __init__.py files: the test folders are not packages (pytest puts each on sys.path, so
        # `import harness` works as in the plain pytest run).
        legacy_create_init = False,
        main = "bazel_pytest.py",
        # "external": never a cached result; the tests depend on the Python environment (numpy, ai-edge-litert, ...),
        # which Bazel does not track.
        tags = ["external"],
        python_version = "PY3",
        deps = [
            "//converter:sdconvert",
            "//python:sdlite",
        ],
    )
