#!/usr/bin/env python3
"""Checks that the modules of a Rust module directory import each other without a cycle.

Usage: scripts/check-module-graph.py [DIR...] [--print]

DIR defaults to crates/tether/src/server. Every path in code counts: `use` declarations
(group imports `use super::{a, b::c}` included), `pub use` re-exports, and paths in
expressions and types (`super::writer::READ_BATCH`, `crate::server::dispatch::post`).
Comments and string literals do not. Inside a nested inline module (`mod tests { .. }`),
`super` is the file's own module, so `use super::*` there is no edge; `super::super::x` is.
An item of `mod.rs` named through `super::Item` is an edge to `mod`.

Prints the edges with --print, and exits 1, naming the cycle, when there is one.
--self-test first checks the checker on small module trees written to a temporary directory.
"""

import os
import re
import sys


def strip(source: str) -> str:
    """The source without comments, string and char literals (replaced by spaces)."""
    out = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            i = n if j < 0 else j
        elif source.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if source.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif source.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', source[i:]) and not (
            i and (source[i - 1].isalnum() or source[i - 1] == "_")
        ):
            hashes = re.match(r'r(#*)"', source[i:]).group(1)
            end = source.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append(" ")
        elif c == '"':
            i += 1
            while i < n and source[i] != '"':
                i += 2 if source[i] == "\\" else 1
            i += 1
            out.append(" ")
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", source[i:]):
            i += len(re.match(r"'(\\.[^']*|[^\\'])'", source[i:]).group(0))
            out.append(" ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


USE = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
PATH = re.compile(r"\b((?:super|self|crate)(?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")
MOD_BLOCK = re.compile(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{")


def expand_use(tree: str) -> list:
    """`a::{b, c::{d, e}}` as the paths `a::b`, `a::c::d`, `a::c::e`."""
    tree = re.sub(r"\s+", "", tree)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def walk(prefix, s):
        s = s.split(" as ")[0]
        if "{" in s:
            head, inner = s.split("{", 1)
            inner = inner[: inner.rfind("}")]
            out = []
            for part in split_top(inner):
                out += walk(prefix + head, part)
            return out
        return [prefix + s]

    return walk("", tree)


def depth_at(stripped: str, pos: int) -> int:
    """How many inline `mod x { .. }` blocks enclose `pos`."""
    depth = 0
    for m in MOD_BLOCK.finditer(stripped, 0, pos):
        open_at = m.end() - 1
        level, j = 1, open_at + 1
        while j < len(stripped) and level:
            if stripped[j] == "{":
                level += 1
            elif stripped[j] == "}":
                level -= 1
            j += 1
        if j > pos:
            depth += 1
    return depth


def target(path: str, module: str, nested: int, modules: set, crate_prefix: list):
    """The sibling module a path names, `mod` for an item of mod.rs, or None."""
    segs = [s for s in re.sub(r"\s+", "", path).split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        if segs[1 : 1 + len(crate_prefix)] != crate_prefix:
            return None
        rest = segs[1 + len(crate_prefix) :]
        if not rest:
            return "mod"
        return rest[0] if rest[0] in modules else "mod"
    supers = 0
    while supers < len(segs) and segs[supers] == "super":
        supers += 1
    if segs[0] == "self":
        # `self::x` in a file module is its own child; in mod.rs, a sibling.
        if module == "mod" and nested == 0 and len(segs) > 1:
            return segs[1] if segs[1] in modules else None
        return None
    levels = supers - nested
    if levels <= 0:
        return None  # the file's own module or something inside it
    if module == "mod":
        return None  # above the directory
    if levels > 1:
        return None
    rest = segs[supers:]
    if not rest or rest[0] == "*":
        return "mod"
    return rest[0] if rest[0] in modules else "mod"


def folder_edges(folder: str, path: str, modules: set, crate_prefix: list) -> set:
    """What a child folder (`x/mod.rs` and the files under it) imports from its siblings: a
    `crate::` path through this folder, or as many `super`s as lead out of the child."""
    out = set()
    for here, _, names in os.walk(path):
        below = os.path.relpath(here, path)
        depth = 0 if below == "." else below.count(os.sep) + 1
        for name in names:
            if not name.endswith(".rs"):
                continue
            with open(os.path.join(here, name), encoding="utf-8") as f:
                stripped = strip(f.read())
            file_depth = depth + (0 if name == "mod.rs" else 1)
            paths, spans = [], []
            for m in USE.finditer(stripped):
                spans.append((m.start(), m.end()))
                paths += [(p, m.start()) for p in expand_use(m.group(1))]
            paths += [
                (m.group(1), m.start())
                for m in PATH.finditer(stripped)
                if not any(a <= m.start() < b for a, b in spans)
            ]
            for p, at in paths:
                segs = [s for s in re.sub(r"\s+", "", p).split("::") if s]
                if not segs:
                    continue
                if segs[0] == "crate":
                    if segs[1 : 1 + len(crate_prefix)] != crate_prefix:
                        continue
                    rest = segs[1 + len(crate_prefix) :]
                else:
                    supers = 0
                    while supers < len(segs) and segs[supers] == "super":
                        supers += 1
                    if supers - depth_at(stripped, at) != file_depth + 1:
                        continue
                    rest = segs[supers:]
                t = rest[0] if rest and rest[0] in modules else "mod"
                if t != folder:
                    out.add(t)
    return out


def self_test() -> None:
    """The checker finds the cycles it must and no edge where there is none."""
    import subprocess
    import tempfile

    cases = {
        # A group import and a path in an expression close a circle.
        "cycle": ({"mod": "mod a;\nmod b;\n", "a": "use super::{b::X, c};\n",
                   "b": "fn f() { super::a::g(); }\n"}, 1),
        # `use super::*` in a nested test module is the file itself; mod.rs items are `mod`.
        "clean": ({"mod": "mod a;\nmod b;\npub use a::X;\n",
                   "a": "use super::b::Y;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
                   "b": "// use super::a::X;\nconst S: &str = \"super::a::X\";\n"}, 0),
        # A submodule naming an item of mod.rs imports mod.rs, which imports it back.
        "upward": ({"mod": "mod a;\npub use a::X;\n", "a": "use super::Config;\n"}, 1),
        # A child folder is one module: its files' paths out of it are its edges.
        "folder": ({"mod": "mod a;\nmod d;\n", "a": "use super::d::X;\n",
                    "d/mod": "mod e;\n", "d/e": "fn f() { super::super::a::g(); }\n"}, 1),
        "folder-clean": ({"mod": "mod a;\nmod d;\n", "a": "use super::d::X;\n",
                          "d/mod": "mod e;\nuse super::b::Y;\n", "d/e": "use super::X;\n",
                          "b": "\n"}, 0),
    }
    for name, (files, expected) in cases.items():
        with tempfile.TemporaryDirectory() as root:
            for module, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, module + ".rs")), exist_ok=True)
                with open(os.path.join(root, module + ".rs"), "w", encoding="utf-8") as f:
                    f.write(text)
            run = subprocess.run([sys.executable, __file__, root], capture_output=True)
            if run.returncode != expected:
                sys.exit(f"check-module-graph self-test {name}: exit {run.returncode}, "
                         f"expected {expected}: {run.stdout!r} {run.stderr!r}")
    print("check-module-graph: self-test ok")


def main() -> int:
    if "--self-test" in sys.argv:
        self_test()
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    show = "--print" in sys.argv
    return max(check(root, show) for root in (args or ["crates/tether/src/server"]))


def check(root: str, show: bool) -> int:
    """Checks one folder; 0 when its imports run one way."""
    src = root.split("/src/", 1)
    crate_prefix = src[1].split("/") if len(src) == 2 else []
    files = {}
    for name in sorted(os.listdir(root)):
        if name.endswith(".rs"):
            # A crate's root (lib.rs) is its folder's mod.rs.
            files["mod" if name == "lib.rs" else name[:-3]] = os.path.join(root, name)
    folders = {}
    for name in sorted(os.listdir(root)):
        if os.path.isfile(os.path.join(root, name, "mod.rs")):
            folders[name] = os.path.join(root, name)
    modules = (set(files) - {"mod"}) | set(folders)
    edges = {m: set() for m in list(files) + list(folders)}
    for folder, path in folders.items():
        edges[folder] = folder_edges(folder, path, modules, crate_prefix)
    for module, path in files.items():
        with open(path, encoding="utf-8") as f:
            stripped = strip(f.read())
        spans = []
        for m in USE.finditer(stripped):
            spans.append((m.start(), m.end()))
            nested = depth_at(stripped, m.start())
            for p in expand_use(m.group(1)):
                if module == "mod" and nested == 0:
                    head = p.split("::", 1)[0]
                    if head in modules:
                        edges[module].add(head)
                        continue
                t = target(p, module, nested, modules, crate_prefix)
                if t and t != module:
                    edges[module].add(t)
        for m in PATH.finditer(stripped):
            if any(a <= m.start() < b for a, b in spans):
                continue
            nested = depth_at(stripped, m.start())
            t = target(m.group(1), module, nested, modules, crate_prefix)
            if t and t != module:
                edges[module].add(t)
        if module == "mod":
            # `x::item` in mod.rs code names its child module x.
            for m in re.finditer(r"(?<![:\w])([a-z_][a-z0-9_]*)\s*::", stripped):
                if m.group(1) in modules:
                    edges[module].add(m.group(1))
    if show:
        for m in sorted(edges):
            print(f"{m} -> {', '.join(sorted(edges[m])) or '(nothing)'}")
    # Depth-first search for a cycle.
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t) :] + [t]
            if t not in state:
                found = visit(t)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state:
            cycle = visit(m)
            if cycle:
                print(f"{root}: import cycle: {' -> '.join(cycle)}", file=sys.stderr)
                return 1
    print(f"{root}: {len(files)} modules, {sum(map(len, edges.values()))} edges, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
