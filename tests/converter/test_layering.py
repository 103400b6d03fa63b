"""Imports inside sdconvert run one way, down the layers below, and sdconvert uses sdlite only through its public
modules. Parsed with ast from the sources (nothing imported), so an upward import anywhere, even inside a function,
fails here."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "converter" / "sdconvert"
SDLITE = ROOT / "python" / "sdlite"

# sdconvert's top-level modules and packages, lowest layer first; a unit may import its own layer and those below
LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors", "atomic_dir", "configs", "manifest", "tflite_run"),  # shared basics, model configs
    ("graph",),  # the .tflite graph IR
    ("ops",),  # the fused ops' definitions and references
    ("winograd",),  # transforms, cost model, planner, tuner, the Winograd pass
    ("rewrite",),  # fusion rules and passes
    ("opcheck",),  # per-op error tables
    ("export",),  # conversion, graph optimisation, parity
    ("inspect", "optimize_cli", "delegate_timer", "cli"),  # command-line layer: wires the runtime in
)
# sdlite's public modules (the package's lazy names, the delegate loader, the interpreter wrapper, and the shared
# model reader / checker, tokenizer, errors and JSON output the two command lines have in common)
SDLITE_PUBLIC = frozenset({"sdlite", "sdlite.native", "sdlite.interpreter", "sdlite.errors", "sdlite.tflite_info",
                           "sdlite.model_check", "sdlite.tokenizer", "sdlite.json_out"})


def layer_of(unit: str) -> int:
    for i, units in enumerate(LAYERS):
        if unit in units:
            return i
    raise AssertionError(f"sdconvert/{unit} is in no layer of {__file__}: add it where it belongs")


@dataclass(frozen=True)
class Import:
    module: str  # importing module, dotted
    target: str  # imported module, dotted (a name imported from a package resolves to its submodule if one exists)
    line: int


def _resolve(name: str, package_dirs: dict[str, Path]) -> bool:
    parts = name.split(".")
    base = package_dirs.get(parts[0])
    if base is None:
        return False
    path = base.joinpath(*parts[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(module: str, source: str, is_package: bool) -> list[Import]:
    dirs = {"sdconvert": PACKAGE, "sdlite": SDLITE}
    pkg = module if is_package else module.rpartition(".")[0]
    out: list[Import] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [Import(module, a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{mod}.{alias.name}"
                out.append(Import(module, sub if _resolve(sub, dirs) else mod, node.lineno))
    return out


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    unit = module.split(".")[1] if "." in module else "__init__"
    bad = []
    for imp in imports_of(module, source, is_package):
        top = imp.target.split(".")[0]
        if top == "sdconvert" and "." in imp.target:
            target_unit = imp.target.split(".")[1]
            if target_unit != unit and layer_of(target_unit) > layer_of(unit):
                bad.append(f"{module}:{imp.line} imports {imp.target} (layer {LAYERS[layer_of(target_unit)]} is above "
                           f"{LAYERS[layer_of(unit)]})")
        elif top == "sdlite":
            if imp.target not in SDLITE_PUBLIC:
                bad.append(f"{module}:{imp.line} imports {imp.target}, not one of sdlite's public modules")
    return bad


def converter_modules() -> list[tuple[str, Path, bool]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        out.append((".".join(parts[:-1] if is_package else parts), path, is_package))
    return out


def test_every_converter_module_imports_down_and_sdlite_only_publicly() -> None:
    modules = converter_modules()
    assert len(modules) > 50
    bad = [v for name, path, pkg in modules for v in violations(name, path.read_text(), pkg)]
    assert bad == []


def test_every_top_level_unit_has_a_layer() -> None:
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or
             (p.is_dir() and any(p.glob("*.py")))}
    assert {u for units_ in LAYERS for u in units_} == units


def test_the_check_catches_upward_and_private_imports() -> None:
    assert violations("sdconvert.ops.gelu", "from sdconvert.winograd.plan import make_plan\n") != []
    assert violations("sdconvert.rewrite.sites", "def f():\n    from ..export import optimize\n") != []
    assert violations("sdconvert.graph", "from sdconvert import ops\n", is_package=True) != []
    assert violations("sdconvert.winograd.tune", "from sdlite.bench.device_profile import ProfileSnapshot\n") != []
    assert violations("sdconvert.winograd.tune", "from sdlite import native\n") == []  # a public module
    # the command-line layer too: the delegate's profile file is read through sdlite.native.profile_node_ms
    assert violations("sdconvert.delegate_timer", "from sdlite.bench.device_profile import ProfileSnapshot\n") != []
    assert violations("sdconvert.export.optimize", "from sdconvert.winograd.apply import winograd_pass\n") == []
