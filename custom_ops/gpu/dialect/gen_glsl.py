#!/usr/bin/env python3
"""Generate the GL backend's compute shaders from the portable kernel dialect (gpu/dialect/prelude.h).

The build runs this once: the C preprocessor expands the dialect files (in the order of gpu/kernel_sources.txt,
with SD_API_GLSL defined), then every ``KERNEL`` of the expansion becomes one GLSL ES 3.10 compute-shader section
of the embedded shader library (backends/gl/gl_shaders.h's format: ``//== file`` / ``//== kernel`` markers):

* buffer parameters -> ``layout(std430, binding = k) buffer`` blocks in parameter order (``readonly`` when the
  parameter is ``const``), plus the ``NAME_v4`` (vec4), ``NAME_u32`` (packed halves) and ``NAME_h4`` (four packed
  halves) views of the same binding when the kernel uses them (the dialect's LD4A / ST4A / LDH / LDH4A / ACT_*; a
  buffer used only through half views has no float view); scalars -> ``layout(location = j) uniform``;
* ``LOCAL`` arrays declared in the kernel -> ``shared`` arrays at file scope;
* C casts ``(T)x`` -> constructors ``T(x)``; ``.s0``..``.s3`` -> ``.x``..``.w``; ``const`` inside functions,
  ``inline`` and ``__attribute__((...))`` dropped; ``CONSTANT_TABLE`` arrays -> ``const T name[N] = T[N](...)``;
  identifiers that GLSL reserves (``input``, ``filter``, ``half``, ...) renamed;
* the helper functions and tables the kernel uses (transitively) are copied in front of it, in source order.

Anything the translation cannot express (a pointer variable, a buffer or local-memory parameter of a helper, a
``LOCAL`` array outside a kernel) is a build error naming the kernel or function and the dialect rule. The
shaders are compiled on llvmpipe by the tests, so GLSL's stricter typing (no implicit int/float conversions,
boolean conditions) is checked in CI too.

Usage: gen_glsl.py --cpp "c++ -E" --prelude P --runtime R --out OUT.cc --root DIR FILE...
"""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# GLSL ES 3.10 keywords and reserved words that are ordinary identifiers in OpenCL C (renamed with a trailing "_").
GLSL_RESERVED = frozenset(
    """attribute varying coherent volatile restrict readonly writeonly atomic_uint layout centroid flat smooth
    noperspective patch sample subroutine in out inout invariant precise lowp mediump highp precision sampler2D
    buffer shared uniform discard input output hvec2 hvec3 hvec4 dvec2 dvec3 dvec4 fvec2 fvec3 fvec4 sizeof cast
    namespace using asm class union enum typedef template this resource goto noinline public static extern external
    interface long short double half fixed unsigned superp filter image1D common partition active mat2 mat3 mat4
    bvec2 bvec3 bvec4 main""".split()
)
# Types a C cast may name (after the prelude's float4 -> vec4 etc.).
CAST_TYPES = frozenset("float int uint bool vec2 vec3 vec4 ivec2 ivec3 ivec4 uvec2 uvec3 uvec4".split())
SCALAR_PARAM_TYPES = frozenset(("int", "float", "uint"))
BUFFER_TYPES = {"float": "float", "vec4": "vec4", "int": "int", "uint": "uint", "uvec4": "uvec4", "half_": None}
SWIZZLE = {"s0": "x", "s1": "y", "s2": "z", "s3": "w"}

TOKEN_RE = re.compile(
    r"""(?P<ws>[ \t\r]+)|(?P<nl>\n)
    |(?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fFuU]?|0[xX][0-9a-fA-F]+[uU]?)
    |(?P<id>[A-Za-z_]\w*)
    |(?P<punct>\+\+|--|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|->|.)""",
    re.VERBOSE,
)


class DialectError(Exception):
    pass


@dataclass
class Tok:
    kind: str  # ws, nl, num, id, punct
    text: str


def tokenize(text: str) -> list[Tok]:
    out: list[Tok] = []
    for m in TOKEN_RE.finditer(text):
        kind = m.lastgroup or "punct"
        out.append(Tok(kind, m.group()))
    return out


def render(toks: list[Tok]) -> str:
    return "".join(t.text for t in toks)


def sig(toks: list[Tok]) -> list[Tok]:
    """The tokens that are not white space."""
    return [t for t in toks if t.kind not in ("ws", "nl")]


def match_close(toks: list[Tok], i: int) -> int:
    """Index of the bracket closing the one at toks[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    open_, close = toks[i].text, pairs[toks[i].text]
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text == open_:
            depth += 1
        elif toks[j].text == close:
            depth -= 1
            if depth == 0:
                return j
    raise DialectError(f"unbalanced '{open_}'")


def next_sig(toks: list[Tok], i: int) -> int:
    while i < len(toks) and toks[i].kind in ("ws", "nl"):
        i += 1
    return i


def prev_sig(toks: list[Tok], i: int) -> int:
    while i >= 0 and toks[i].kind in ("ws", "nl"):
        i -= 1
    return i


# ---- preprocessing --------------------------------------------------------------------------------------------


@dataclass
class Line:
    text: str
    file: str
    line: int


def preprocess(cpp: list[str], prelude: Path, files: list[Path], act_half: bool = False,
               compact: bool = False) -> list[Line]:
    """The dialect files expanded for GLSL, one entry per output line with the source position it came from.

    ``act_half``: half activation storage (``SD_ACT_HALF`` 1, the prelude's ``ACT_*`` macros on ``_u32`` views).
    ``compact``: ``SD_GL_COMPACT`` 1, aligned float4 accesses as four floats (no ``_v4`` views)."""
    parts = ["#define SD_API_GLSL 1\n", f"#define SD_ACT_HALF {int(act_half)}\n",
             f"#define SD_GL_COMPACT {int(compact)}\n", f'#include "{prelude.resolve()}"\n']
    parts += [f'#include "{f.resolve()}"\n' for f in files]
    proc = subprocess.run(
        cpp + ["-undef", "-nostdinc", "-x", "c", "-std=c99", "-"],
        input="".join(parts), capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise DialectError(f"the C preprocessor failed:\n{proc.stderr}")
    lines: list[Line] = []
    cur_file, cur_line = "<cpp>", 1
    marker = re.compile(r'^# (\d+) "([^"]*)"')
    for raw in proc.stdout.split("\n"):
        m = marker.match(raw)
        if m:
            cur_line, cur_file = int(m.group(1)), m.group(2)
            continue
        if raw.startswith("#pragma"):  # _Pragma("unroll") and friends: OpenCL-only hints
            raw = ""
        lines.append(Line(raw, cur_file, cur_line))
        cur_line += 1
    return lines


# ---- top-level items ------------------------------------------------------------------------------------------


@dataclass
class Item:
    kind: str  # kernel, function, prototype, table, other
    name: str
    toks: list[Tok]
    file: str
    line: int
    deps: set[str] = field(default_factory=set)


def split_items(lines: list[Line]) -> list[Item]:
    """Top-level declarations of the expansion (functions, kernels, tables), each with its first source line."""
    toks: list[Tok] = []
    origin: list[tuple[str, int]] = []  # source position of each token
    for ln in lines:
        for t in tokenize(ln.text):
            toks.append(t)
            origin.append((ln.file, ln.line))
        toks.append(Tok("nl", "\n"))
        origin.append((ln.file, ln.line))
    items: list[Item] = []
    i, n = 0, len(toks)
    while i < n:
        i = next_sig(toks, i)
        if i >= n:
            break
        start, depth, j = i, 0, i
        end = -1
        while j < n:
            t = toks[j].text
            if t in "([{":
                if t == "{" and depth == 0 and toks[prev_sig(toks, j - 1)].text == ")":
                    end = match_close(toks, j)  # a function body
                    break
                depth += 1
            elif t in ")]}":
                depth -= 1
            elif t == ";" and depth == 0:
                end = j
                break
            j += 1
        if end < 0:
            raise DialectError(f"{origin[start][0]}:{origin[start][1]}: unterminated declaration")
        body = toks[start:end + 1]
        items.append(classify(body, *origin[start]))
        i = end + 1
    return items


def classify(toks: list[Tok], file: str, line: int) -> Item:
    s = sig(toks)
    texts = [t.text for t in s]
    if "__sd_kernel" in texts:
        name = texts[texts.index("(") - 1]
        return Item("kernel", name, toks, file, line)
    if "__sd_constant" in texts:
        name = texts[texts.index("[") - 1] if "[" in texts else texts[texts.index("=") - 1]
        return Item("table", name, toks, file, line)
    if "(" in texts and ("=" not in texts or texts.index("(") < texts.index("=")):
        name = texts[texts.index("(") - 1]
        return Item("function" if texts[-1] == "}" else "prototype", name, toks, file, line)
    return Item("other", texts[-2] if len(texts) > 1 else "", toks, file, line)


# ---- translation ----------------------------------------------------------------------------------------------


def rename_reserved(toks: list[Tok]) -> None:
    for t in toks:
        if t.kind == "id" and t.text in GLSL_RESERVED:
            t.text += "_"


def drop_attributes(toks: list[Tok]) -> list[Tok]:
    out: list[Tok] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.kind == "id" and t.text == "__attribute__":
            j = next_sig(toks, i + 1)
            i = match_close(toks, j) + 1
            continue
        if t.kind == "id" and t.text in ("inline", "static"):
            i += 1
            continue
        out.append(t)
        i += 1
    return out


def operand_end(toks: list[Tok], i: int) -> int:
    """Index just past the unary expression starting at (significant) token i."""
    t = toks[i]
    if t.text in ("-", "+", "!", "~"):
        return operand_end(toks, next_sig(toks, i + 1))
    if t.text == "(":
        j = match_close(toks, i) + 1
    elif t.kind in ("id", "num"):
        j = i + 1
    else:
        raise DialectError(f"cannot translate a cast of '{t.text}'")
    while True:  # postfix: calls, subscripts, members
        k = next_sig(toks, j)
        if k < len(toks) and toks[k].text in ("(", "["):
            j = match_close(toks, k) + 1
        elif k < len(toks) and toks[k].text == ".":
            j = next_sig(toks, k + 1) + 1
        else:
            return j


def translate_casts(toks: list[Tok]) -> list[Tok]:
    out = list(toks)
    i = 0
    while i < len(out):
        if out[i].text == "(":
            a = next_sig(out, i + 1)
            b = next_sig(out, a + 1) if a < len(out) else a
            p = prev_sig(out, i - 1)
            is_call = p >= 0 and (out[p].kind in ("id", "num") or out[p].text in (")", "]"))
            if (not is_call and a < len(out) and out[a].kind == "id" and out[a].text in CAST_TYPES
                    and b < len(out) and out[b].text == ")"):
                c = next_sig(out, b + 1)
                e = operand_end(out, c)
                operand = out[c:e]
                if operand and operand[0].text == "(":
                    operand = operand[1:-1] if match_close(operand, 0) == len(operand) - 1 else operand
                repl = [Tok("id", out[a].text), Tok("punct", "(")] + translate_casts(operand) + [Tok("punct", ")")]
                out[i:e] = repl
                continue
        i += 1
    return out


def simple_rewrites(toks: list[Tok], keep_const: bool) -> list[Tok]:
    out: list[Tok] = []
    for i, t in enumerate(toks):
        if t.kind == "id" and t.text == "const" and not keep_const:
            continue
        if t.kind == "id" and t.text in SWIZZLE:
            p = prev_sig(toks, i - 1)
            if p >= 0 and toks[p].text == ".":
                out.append(Tok("id", SWIZZLE[t.text]))
                continue
        out.append(t)
    return out


def identifiers(toks: list[Tok]) -> set[str]:
    return {t.text for t in toks if t.kind == "id"}


def names_used(toks: list[Tok]) -> set[str]:
    """Identifiers used as names: not a member or swizzle after ``.`` (``v.x`` does not use a buffer ``x``)."""
    sig_toks = sig(toks)
    return {t.text for k, t in enumerate(sig_toks) if t.kind == "id" and (k == 0 or sig_toks[k - 1].text != ".")}


def check_no_pointers(toks: list[Tok], what: str) -> None:
    s = sig(toks)
    for k in range(1, len(s) - 1):
        if s[k].text == "*" and s[k - 1].text in set(BUFFER_TYPES) | {"void", "half"} and s[k + 1].kind == "id":
            raise DialectError(f"{what}: pointer '{s[k - 1].text}* {s[k + 1].text}' (dialect rule: index a buffer "
                               "parameter, or write the helper as a macro)")
        if s[k].text in ("__sd_global", "__sd_local"):
            raise DialectError(f"{what}: '{s[k].text.replace('__sd_', '').upper()}' here (dialect rule: buffers "
                               "and local arrays are used only in kernels and the macros they expand)")


@dataclass
class Param:
    name: str
    type: str
    buffer: bool
    readonly: bool = False


def parse_params(toks: list[Tok], kernel: str) -> list[Param]:
    groups: list[list[Tok]] = [[]]
    depth = 0
    for t in sig(toks):
        if t.text in "([":
            depth += 1
        elif t.text in ")]":
            depth -= 1
        if t.text == "," and depth == 0:
            groups.append([])
        else:
            groups[-1].append(t)
    params: list[Param] = []
    for g in groups:
        words = [t.text for t in g]
        if not words:
            continue
        if "__sd_global" in words:
            if "*" not in words:
                raise DialectError(f"kernel {kernel}: GLOBAL parameter without '*': {' '.join(words)}")
            types = [w for w in words if w in BUFFER_TYPES]
            if len(types) != 1:
                raise DialectError(f"kernel {kernel}: unsupported buffer parameter '{' '.join(words)}'")
            params.append(Param(words[-1], types[0], True, readonly="const" in words))
        else:
            if len(words) != 2 or words[0] not in SCALAR_PARAM_TYPES:
                raise DialectError(f"kernel {kernel}: parameter '{' '.join(words)}' is neither a GLOBAL buffer nor "
                                   "an int / uint / float")
            params.append(Param(words[1], words[0], False))
    return params


def hoist_locals(body: list[Tok], kernel: str) -> tuple[list[Tok], list[str]]:
    """Removes the `__sd_local T name[...];` statements of a kernel body; returns them as `shared` declarations."""
    out: list[Tok] = []
    shared: list[str] = []
    i = 0
    while i < len(body):
        if body[i].text == "__sd_local":
            j = i
            while body[j].text != ";":
                j += 1
            decl = [t for t in body[i + 1:j]]
            texts = [t.text for t in decl]
            # a '*' inside the brackets belongs to the size (LOCAL float chan[4 * N]); before them it makes a pointer
            declarator = texts[:texts.index("[")] if "[" in texts else texts
            if "=" in texts or "*" in declarator:
                raise DialectError(f"kernel {kernel}: LOCAL declaration '{render(decl).strip()}' (dialect rule: "
                                   "LOCAL arrays only, no initialiser, no pointers)")
            shared.append("shared " + " ".join(render(decl).split()) + ";")
            i = j + 1
            continue
        out.append(body[i])
        i += 1
    return out, shared


def translate_table(item: Item) -> str:
    s = sig(item.toks)
    texts = [t.text for t in s]
    eq = texts.index("=")
    decl = [t for t in texts[:eq] if t not in ("__sd_constant", "const")]
    if "{" not in texts:
        return "const " + " ".join(decl) + " = " + " ".join(texts[eq + 1:])
    typ, name = decl[0], decl[1]
    inner = texts[texts.index("{") + 1:len(texts) - 1 - texts[::-1].index("}")]
    if typ == "float":  # GLSL converts nothing implicitly, not even in constructors: float[2](1, 0) is an error
        inner = [f"{t}.0" if re.fullmatch(r"\d+", t) else t for t in inner]
    values = [v for v in " ".join(inner).split(",") if v.strip()]
    return f"const {typ} {name}[{len(values)}] = {typ}[{len(values)}]({', '.join(v.strip() for v in values)});"


@dataclass
class Kernel:
    name: str
    file: str
    line: int
    text: str


def translate(items: list[Item]) -> list[Kernel]:
    helpers: dict[str, Item] = {}
    order: dict[str, int] = {}
    translated: dict[str, str] = {}
    for idx, it in enumerate(items):
        rename_reserved(it.toks)
        if it.kind in ("function", "table", "other"):
            if it.kind == "function":
                toks = drop_attributes(it.toks)
                check_no_pointers(toks, f"function {it.name}")
                toks = simple_rewrites(translate_casts(toks), keep_const=False)
                translated[it.name] = render(toks)
            elif it.kind == "table":
                translated[it.name] = translate_table(it)
            else:
                translated[it.name] = render(it.toks)
            helpers[it.name] = it
            order[it.name] = idx
            it.deps = identifiers(it.toks) - {it.name}
    kernels: list[Kernel] = []
    for it in items:
        if it.kind != "kernel":
            continue
        toks = drop_attributes(it.toks)
        s_idx = [k for k, t in enumerate(toks) if t.text == "("][0]
        p_end = match_close(toks, s_idx)
        b_start = next_sig(toks, p_end + 1)
        if toks[b_start].text != "{":
            raise DialectError(f"kernel {it.name}: expected a body")
        params = parse_params(toks[s_idx + 1:p_end], it.name)
        body, shared = hoist_locals(toks[b_start:], it.name)
        check_no_pointers(body, f"kernel {it.name}")
        body = simple_rewrites(translate_casts(body), keep_const=False)
        body_text = render(body)
        used = identifiers(body) | {w for decl in shared for w in re.findall(r"[A-Za-z_]\w*", decl)}
        bare = names_used(body)  # the buffer parameters indexed by their own name
        # helpers used, transitively, in source order
        need: set[str] = set()
        todo = [u for u in used if u in helpers]
        while todo:
            h = todo.pop()
            if h in need:
                continue
            need.add(h)
            todo += [d for d in helpers[h].deps if d in helpers and d not in need]
        parts = [translated[h] for h in sorted(need, key=order.__getitem__)]
        decls: list[str] = []
        binding = location = 0
        for p in params:
            if p.buffer:
                ro = "readonly " if p.readonly else ""
                views = []
                half_views = f"{p.name}_u32" in used or f"{p.name}_h4" in used
                # a half buffer (a `half*` parameter, or an ACT_* one with SD_ACT_HALF 1) has only its half views: the
                # launch reads each binding's element size from its declarations (GlDevice, BindingElementBytes)
                if BUFFER_TYPES[p.type] is not None and (p.name in bare or not half_views):
                    views.append(("", BUFFER_TYPES[p.type]))
                if f"{p.name}_v4" in used:
                    views.append(("_v4", "vec4"))
                if f"{p.name}_u32" in used:
                    views.append(("_u32", "uint"))
                if f"{p.name}_h4" in used:
                    views.append(("_h4", "uvec2"))
                for suffix, typ in views:
                    decls.append(f"layout(std430, binding = {binding}) {ro}buffer SdBuf{binding}{suffix} "
                                 f"{{ {typ} {p.name}{suffix}[]; }};")
                binding += 1
            else:
                decls.append(f"layout(location = {location}) uniform {p.type} {p.name};")
                location += 1
        text = "\n".join(parts) + ("\n" if parts else "")
        text += "\n".join(decls + shared) + "\n"
        text += f"// kernel {it.name}: {Path(it.file).name}:{it.line}\nvoid main() " + body_text + "\n"
        kernels.append(Kernel(it.name, it.file, it.line, text))
    return kernels


# ---- output ---------------------------------------------------------------------------------------------------


def library_text(runtime: str, kernels: list[Kernel], root: Path) -> str:
    out = ["//== file gpu/dialect/glsl_runtime.glsl\n", runtime]
    by_file: dict[str, list[Kernel]] = {}
    for k in kernels:
        by_file.setdefault(k.file, []).append(k)
    for f, ks in by_file.items():
        try:
            rel = str(Path(f).resolve().relative_to(root.resolve()))
        except ValueError:
            rel = f
        out.append(f"//== file {rel}\n")
        for k in ks:
            out.append(f"//== kernel {k.name}\n{k.text}")
    return "".join(out)


def cpp_source(texts: dict[tuple[bool, bool], str]) -> str:
    """The C++ file: ShaderSource() (float activation storage), ShaderSourceActHalf() (half storage) and their
    Compact twins (the kernels whose compact variant differs: those with a ``_v4`` view)."""
    names = {(False, False): "ShaderSource", (True, False): "ShaderSourceActHalf",
             (False, True): "ShaderSourceCompact", (True, True): "ShaderSourceActHalfCompact"}
    out = "namespace sdgpu::gl {\n"
    for key, name in names.items():
        assert ")SDGPUGL\"" not in texts[key]  # the raw-string delimiter must not occur in the text
        out += "const char* " + name + "() {\n  return R\"SDGPUGL(" + texts[key] + ")SDGPUGL\";\n}\n"
    return out + "}  // namespace sdgpu::gl\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpp", required=True, help="the C preprocessor command, e.g. 'c++ -E'")
    ap.add_argument("--prelude", type=Path, required=True)
    ap.add_argument("--runtime", type=Path, required=True, help="GLSL text prepended to every shader")
    ap.add_argument("--root", type=Path, required=True, help="paths in the library are relative to this")
    ap.add_argument("--out", type=Path, required=True, help="C++ file (or .glsl with --plain)")
    ap.add_argument("--plain", action="store_true", help="write the library text itself, not C++")
    ap.add_argument("--act-half", action="store_true", help="with --plain: the half activation storage library")
    ap.add_argument("--compact", action="store_true",
                    help="with --plain: the compact variants (SD_GL_COMPACT 1) of the kernels where they differ")
    ap.add_argument("files", type=Path, nargs="+")
    args = ap.parse_args(argv)
    texts: dict[tuple[bool, bool], str] = {}
    normal: dict[bool, dict[str, str]] = {}  # per act_half: kernel name -> text, to keep only differing compact ones
    variants = ([(h, c) for c in (False, True) for h in (False, True)] if not args.plain
                else [(args.act_half, False)] + ([(args.act_half, True)] if args.compact else []))
    for act_half, compact in variants:
        try:
            lines = preprocess(shlex.split(args.cpp), args.prelude, args.files, act_half, compact)
            kernels = translate(split_items(lines))
        except DialectError as e:
            print(f"gen_glsl.py: error: {e}", file=sys.stderr)
            return 1
        names = [k.name for k in kernels]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            print(f"gen_glsl.py: error: kernels defined twice: {sorted(dup)}", file=sys.stderr)
            return 1
        if compact:
            kernels = [k for k in kernels if normal[act_half].get(k.name) != k.text]
        else:
            normal[act_half] = {k.name: k.text for k in kernels}
        texts[(act_half, compact)] = library_text(args.runtime.read_text(), kernels, args.root)
    content = texts[(args.act_half, args.compact)] if args.plain else cpp_source(texts)
    if str(args.out) == "/dev/stdout":
        sys.stdout.write(content)
    elif not args.out.exists() or args.out.read_text() != content:  # keep the timestamp when nothing changed
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
