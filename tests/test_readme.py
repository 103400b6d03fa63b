"""README.md is read by newcomers and run by this test: set-up commands, paragraph length, the delegate options table,
links, and its two Python snippets (the diffusers-style example against the CLI, the delegate in a plain LiteRT app).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
MAX_WORDS = 150
INSTALL = "bash scripts/install.sh && sdconvert --random-weights tiny --verify -o out/tiny"
TEST = "bash scripts/test.sh"


def section(title: str) -> str:
    """The README text under the heading ``title`` (any level), up to the next heading of that level or above."""
    m = re.search(rf"^(#+) {re.escape(title)}\n", README, re.M)
    assert m, f"README has no section {title!r}"
    level = len(m.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(README, m.end())
    return README[m.end(): end.start() if end else len(README)]


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def prose_blocks(text: str) -> list[str]:
    """Paragraphs outside code fences; each list item and table row counts as its own paragraph."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    blocks = []
    for para in re.split(r"\n\s*\n", text):
        current: list[str] = []
        for line in para.splitlines():
            if line.startswith(("|", "- ", "* ", "#")) or re.match(r"\d+\. ", line):
                if current:
                    blocks.append(" ".join(current))
                current = [line]
            else:
                current.append(line)
        if current:
            blocks.append(" ".join(current))
    return [b for b in blocks if b.strip()]


def test_the_two_setup_commands_stay() -> None:
    blocks = code_blocks(section("Set-up (fresh machine)"), "bash")
    assert [b.strip() for b in blocks] == [INSTALL, TEST]


def test_no_paragraph_over_150_words() -> None:
    long = [(len(b.split()), b[:80]) for b in prose_blocks(README) if len(b.split()) > MAX_WORDS]
    assert not long, long


def test_delegate_options_table_has_one_row_per_option() -> None:
    from sdlite.native import DelegateOptions

    rows = [line for line in section("Delegate options").splitlines() if line.startswith("| `")]
    names = [re.match(r"\| `(\w+)` \|", row).group(1) for row in rows]
    assert len(names) == len(set(names)), names
    assert set(names) == {f.name for f in dataclasses.fields(DelegateOptions)}
    # ... and exactly the keys the delegate's own parser accepts
    # (the top-level `if (key == "...")` chain; gl_limits' own sub-keys are parsed with `key == "..." ?`)
    parsed = set(re.findall(r'if \(key == "(\w+)"\)', (ROOT / "custom_ops/delegate/options.cc").read_text()))
    assert set(names) == parsed
    assert all(len(re.split(r"(?<!\\)\|", row)) == 5 for row in rows)  # option | values | what it does


def test_links_point_at_files() -> None:
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert links
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), link


@pytest.fixture()
def readme_cwd(tmp_path: Path, tiny_export: Path, tiny_fused_export: Path):
    """A working directory where the README's ``out/tiny`` and ``out/tiny-fused`` exist (as the set-up makes them)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "tiny").symlink_to(tiny_export)
    (tmp_path / "out" / "tiny-fused").symlink_to(tiny_fused_export)
    old = Path.cwd()
    os.chdir(tmp_path)
    yield tmp_path
    os.chdir(old)


def _cli(command: str, *extra: str) -> None:
    from sdlite.cli import main

    argv = shlex.split(command)
    assert argv[:2] == ["sdlite", "generate"], command
    assert main([*argv[1:], *extra, "--no-progress"]) == 0


def test_python_example_gives_the_cli_pixels(readme_cwd: Path) -> None:
    """The README's Python example, run as written, makes the same images as the README's CLI commands."""
    from PIL import Image

    run = section("Run")
    (example,) = code_blocks(section("Python"), "python")
    namespace: dict = {}
    exec(compile(example, "README.md (Python example)", "exec"), namespace)

    (cli_cat,) = [line for block in code_blocks(section("Command line"), "bash") for line in block.splitlines()
                  if line.startswith("sdlite generate")]
    _cli(cli_cat)
    out_png = shlex.split(cli_cat)[shlex.split(cli_cat).index("-o") + 1]
    cat = np.asarray(Image.open(readme_cwd / out_png))
    assert namespace["image"].mode == "RGB" and namespace["image"].size == cat.shape[1::-1]
    np.testing.assert_array_equal(np.asarray(namespace["image"]), cat)
    np.testing.assert_array_equal(np.asarray(Image.open(readme_cwd / "cat-python.png")), cat)

    # the second call, with the DDIM sampler swapped in: the CLI command the README names for it
    (cli_castle,) = re.findall(r"`(sdlite generate out/tiny\s+-p \"a castle\"[^`]*)`", run)
    _cli(re.sub(r"\s+", " ", cli_castle), "-o", "castle.png")
    images = namespace["images"]
    assert len(images) == 2
    for k, im in enumerate(images):
        np.testing.assert_array_equal(np.asarray(im), np.asarray(Image.open(readme_cwd / f"castle-{k}.png")))
    assert not np.array_equal(np.asarray(images[0]), np.asarray(images[1]))


def test_delegate_snippet_runs_in_a_plain_litert_app(readme_cwd: Path) -> None:
    """The "own LiteRT app" snippet as written (our delegate, OpenCL backend), checked against the CPU kernels."""
    from ai_edge_litert.interpreter import Interpreter

    from sdlite import native

    (snippet,) = code_blocks(section("Use the delegate in your own LiteRT app"), "python")
    namespace: dict = {}
    exec(compile(snippet, "README.md (delegate snippet)", "exec"), namespace)
    got = namespace["noise_pred"]
    assert native.stats(namespace["delegate"])["partitions"] == 1  # the whole UNet ran in our delegate
    reference = Interpreter(model_path="out/tiny-fused/unet.tflite", experimental_delegates=[native.load("cpu")])
    want = reference.get_signature_runner()(**namespace["inputs"])["noise_pred"]
    assert got.shape == want.shape and np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))
