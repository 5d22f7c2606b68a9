#!/usr/bin/env python3
"""Import circles in the library crate: strongly connected components of the
file-level import graph of src/ (issue #50: "no circle in the whole crate").

    python3 scripts/import-circles.py          # the circles, one per block
    python3 scripts/import-circles.py --why    # and the names that tie each edge
    python3 scripts/import-circles.py --src DIR           # another tree's src/
    python3 scripts/import-circles.py --children-may-use-parents
    python3 scripts/import-circles.py --floors  # and the gateway's floors kept

Exits 1 if it finds a circle, 0 if none.

How the graph is read (a small reader of the source text, not rustc):
- The module tree is followed from src/lib.rs through `mod name;` declarations
  (`name.rs` or `name/mod.rs`). src/main.rs is a client of the library, not part
  of it. Test code is left out: `#[cfg(test)] mod ... { }` blocks and files
  declared by `#[cfg(test)] mod ...;`, and so under `#[cfg(all(test, ...))]`
  (a test that needs a feature): none of it ships, and nothing imports a
  test, so it closes no circle the shipped code has. Code under
  `cfg(any(test, ...))` or `cfg(not(test))` ships, and counts.
- A node is a file. An edge A -> B says that code in A names an item defined in
  B: through a `use` line, a `crate::`/`super::`/`self::` path in the code, or a
  path through an imported module (`files::read_upstream`).
- A name is followed through re-exports (`pub use`) and imports to the file
  that defines it: `use super::custody::Verified` points at the file where
  `Verified` is declared, not at custody/mod.rs if mod.rs only re-exports it.
- Declaring a child (`mod child;`) is no edge, and neither is re-exporting a
  child's item (`pub use child::X;`) unless the re-exporting file itself uses
  `X` in its code: a façade that forwards a name does not depend on it.
- So a child whose `use super::*` (or `use super::{A, B}`) brings items that
  its parent *defines* points up at its parent, and a parent that *uses* its
  child's items points down: both together are a circle, and are reported.
  A glob counts only the names the file's code actually mentions; a parent
  that only declares `mod child; pub use child::X;` gives no edge back.
- Importing a module itself (`use super::files;`) is no edge; using an item
  through it is. A trait imported only for its methods counts (a private
  `use` is an edge even if its name does not appear in the code).
- With --children-may-use-parents, an edge from a file to its own ancestor
  module (`super::`, the folder's mod.rs helpers) is dropped: the reading
  that allows a folder's files to share its mod.rs's private helpers, and
  finds only circles through siblings or other folders. Without it (the
  default, and the test of "no circle"), every edge counts.
- With --floors, the floors listed at the top of src/gateway/mod.rs
  (`//! - G<n>, what: `file.rs`, `folder/`, ...`) are read, and every import
  from a gateway file to a gateway file on a higher floor is reported, as is
  a gateway file on no floor. A folder's files are on its floor unless one
  is named on a floor of its own.
- Unknown last segments (enum variants, associated items, macro-made names)
  count as the file of the last module resolved. External crates are ignored.
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

ITEM = re.compile(
    r"(?<!['\w])(?:struct|enum|fn|trait|type|const|static|union)\s+([A-Za-z_]\w*)|\bmacro_rules!\s*([A-Za-z_]\w*)"
)
MOD_DECL = re.compile(
    r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*;"
)
USE = re.compile(r"(?:^|(?<=[\s;{}]))(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
PATH = re.compile(r"(?<![\w:$])(\$?[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)+)")
IDENT = re.compile(r"[A-Za-z_]\w*")
KEYWORDS = set(
    "as async await break const continue crate dyn else enum extern false fn for if impl in let loop "
    "match mod move mut pub ref return self Self static struct super trait true type unsafe use where while".split()
)


def strip(text):
    """The code without comments, string and char literals."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif re.match(r'b?r#*"', text[i : i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + m.end())
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"' or (c == "b" and text.startswith('b"', i) and not (text[i - 1].isalnum() or text[i - 1] == "_")):
            i += 1 if c == '"' else 2
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'":
            m = re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:])
            if m:
                i += m.end()
                out.append("' '")
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def test_only(attributes):
    """Whether `#[...]` attributes hold a `cfg` true only in tests: `cfg(test)`,
    or `cfg(all(...))` with `test` among its terms."""
    for m in re.finditer(r"#\[\s*cfg\s*\((.*?)\)\s*\]", attributes, re.S):
        predicate = re.sub(r"\s+", "", m.group(1))
        if predicate == "test":
            return True
        if predicate.startswith("all(") and predicate.endswith(")"):
            depth, term, terms = 0, "", []
            for c in predicate[4:-1] + ",":
                depth += {"(": 1, ")": -1}.get(c, 0)
                if c == "," and depth == 0:
                    terms.append(term)
                    term = ""
                else:
                    term += c
            if "test" in terms:
                return True
    return False


TEST_MOD = re.compile(r"((?:#\[[^\]]*\]\s*)+)(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")


def drop_test_blocks(code):
    """Test-only (`test_only`) `mod name { ... }` blocks removed, braces matched."""
    start = 0
    while True:
        m = TEST_MOD.search(code, start)
        if not m:
            return code
        if not test_only(m.group(1)):
            start = m.end()
            continue
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        code = code[: m.start()] + code[i:]


def use_tree(text, prefix):
    """(path segments, binding) for each leaf of a use tree; binding '*' is a glob."""
    text = text.strip()
    leaves = []
    if text.endswith("}"):
        head, body = text[: text.index("{")], text[text.index("{") + 1 : -1]
        base = prefix + [s for s in re.split(r"\s*::\s*", head.strip().rstrip(":").strip()) if s]
        depth, start, parts = 0, 0, []
        for i, c in enumerate(body):
            depth += {"{": 1, "}": -1}.get(c, 0)
            if c == "," and depth == 0:
                parts.append(body[start:i])
                start = i + 1
        parts.append(body[start:])
        for part in parts:
            if part.strip():
                leaves += use_tree(part, base)
        return leaves
    alias = None
    m = re.match(r"(.*?)\s+as\s+(\w+)$", text, re.S)
    if m:
        text, alias = m.group(1), m.group(2)
    segs = prefix + [s for s in re.split(r"\s*::\s*", text) if s]
    if segs[-1] == "*":
        return [(segs[:-1], "*")]
    if segs[-1] == "self":
        segs = segs[:-1]
    return [(segs, alias or segs[-1])]


class Module:
    def __init__(self, path, file):
        self.path, self.file = path, file
        self.children, self.items, self.uses, self.code = {}, set(), [], ""


def load():
    modules = {}

    def visit(path, file):
        mod = modules[path] = Module(path, file)
        code = drop_test_blocks(strip(open(file, encoding="utf-8").read()))
        here = os.path.dirname(file)
        base = os.path.basename(file)
        folder = here if base in ("lib.rs", "mod.rs", "main.rs") else os.path.join(here, base[:-3])
        for m in MOD_DECL.finditer(code):
            if test_only(m.group(1)):
                continue
            name = m.group(2)
            for child in (os.path.join(folder, name + ".rs"), os.path.join(folder, name, "mod.rs")):
                if os.path.exists(child):
                    mod.children[name] = path + (name,)
                    visit(path + (name,), child)
                    break
        # Items at the file's top level only: a method in an `impl` is not
        # a module's item.
        depth, top = 0, []
        for c in code:
            depth += {"{": 1, "}": -1}.get(c, 0)
            top.append(c if depth == 0 or c == "{" and depth == 1 else " ")
        for m in ITEM.finditer("".join(top)):
            mod.items.add(m.group(1) or m.group(2))
        mod.items -= KEYWORDS
        body = code
        for m in USE.finditer(code):
            for segs, binding in use_tree(m.group(2), []):
                mod.uses.append((segs, binding, bool(m.group(1))))
        mod.body = USE.sub(" ", body)
        mod.idents = set(IDENT.findall(mod.body)) - KEYWORDS

    visit(("crate",), os.path.join(ROOT, "lib.rs"))
    return modules


def resolve(modules, at, segs, depth=0):
    """('mod', path) or ('item', file, name) or None (outside the crate)."""
    if depth > 20 or not segs:
        return None
    first, rest = segs[0], segs[1:]
    mod = modules[at]
    if first in ("crate", "$crate"):
        cur = ("crate",)
    elif first == "super":
        cur = at[:-1]
    elif first == "self":
        cur = at
    elif first in mod.children:
        cur, rest = mod.children[first], rest
    else:
        bound = [s for s, b, _ in mod.uses if b == first]
        if not bound:
            return None
        target = resolve(modules, at, bound[0], depth + 1)
        if target is None or target[0] == "item":
            return target
        cur = target[1]
    for i, seg in enumerate(rest):
        m = modules[cur]
        if seg == "super":
            cur = cur[:-1]
        elif seg == "self":
            continue
        elif seg in m.children:
            cur = m.children[seg]
        elif seg in m.items:
            return ("item", m.file, seg)
        else:
            bound = [s for s, b, _ in m.uses if b == seg]
            if bound:
                target = resolve(modules, cur, bound[0], depth + 1)
                if target is None or target[0] == "item":
                    return target
                cur = target[1]
            else:
                return ("item", m.file, seg)
    return ("mod", cur)


def graph(modules):
    edges = defaultdict(lambda: defaultdict(set))  # file -> file -> names

    def add(mod, target, name):
        if target and target[0] == "item" and target[1] != mod.file:
            edges[mod.file][target[1]].add(name)

    for mod in modules.values():
        for segs, binding, public in mod.uses:
            if binding == "*":
                glob = resolve(modules, mod.path, segs)
                if not glob or glob[0] != "mod":
                    continue
                g = modules[glob[1]]
                names = g.items | {b for _, b, _ in g.uses if b != "*"} | set(g.children)
                for name in sorted(names & mod.idents):
                    add(mod, resolve(modules, g.path, ["self", name]), name)
                continue
            if public and binding not in mod.idents:
                continue  # a re-export only
            add(mod, resolve(modules, mod.path, segs), binding)
        for m in PATH.finditer(mod.body):
            segs = re.split(r"\s*::\s*", m.group(1))
            first = segs[0]
            if first in ("crate", "$crate", "super", "self") or first in mod.children or any(
                b == first for _, b, _ in mod.uses
            ):
                add(mod, resolve(modules, mod.path, segs), "::".join(segs))
    return edges


def circles(nodes, edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def connect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            connect(v)
    return sorted(out, key=lambda c: (-len(c), c))


def floors_of(gateway_mod):
    """{path relative to src/gateway: floor} from the list in gateway/mod.rs."""
    floors, current = {}, None
    for line in open(gateway_mod, encoding="utf-8"):
        if not line.startswith("//!"):
            continue
        m = re.match(r"//! - G(\d+)\b", line)
        if m:
            current = int(m.group(1))
        elif not line.startswith("//!   "):
            current = None
        if current is not None:
            for name in re.findall(r"`([a-z0-9_/]+(?:\.rs|/))`", line):
                floors[name] = current
    return floors


def floor_check(modules, edges, rel):
    gateway = os.path.join(ROOT, "gateway")
    floors = floors_of(os.path.join(gateway, "mod.rs"))

    def floor(file):
        name = os.path.relpath(file, gateway)
        if name in floors:
            return floors[name]
        parts = name.split("/")
        for i in range(len(parts) - 1, 0, -1):
            folder = "/".join(parts[:i]) + "/"
            if folder in floors:
                return floors[folder]
        return None

    files = sorted(m.file for m in modules.values() if m.file.startswith(gateway + os.sep))
    problems = [f"no floor: {rel(f)}" for f in files if floor(f) is None]
    for source in files:
        for target in sorted(edges.get(source, {})):
            if target in files and None not in (floor(source), floor(target)) and floor(target) > floor(source):
                names = ", ".join(sorted(edges[source][target]))
                problems.append(
                    f"up a floor: {rel(source)} (G{floor(source)}) -> {rel(target)} (G{floor(target)}): {names}"
                )
    print(f"gateway floors: {len(files)} files on {len(set(floors.values()))} floors, {len(problems)} problem(s)")
    for problem in problems:
        print(f"  {problem}")
    return problems


def main():
    global ROOT
    why = "--why" in sys.argv
    if "--src" in sys.argv:
        ROOT = os.path.abspath(sys.argv[sys.argv.index("--src") + 1])
    modules = load()
    edges = graph(modules)
    if "--children-may-use-parents" in sys.argv:
        folder = {m.file: m.path for m in modules.values()}
        for source in edges:
            for target in list(edges[source]):
                if folder[source][: len(folder[target])] == folder[target]:
                    del edges[source][target]
    nodes = {m.file for m in modules.values()}
    rel = lambda f: os.path.relpath(f, os.path.join(ROOT, ".."))
    found = circles(nodes, edges)
    print(f"{len(nodes)} files, {sum(len(t) for t in edges.values())} edges, {len(found)} circle(s)")
    for comp in found:
        print(f"\ncircle of {len(comp)}:")
        for f in comp:
            print(f"  {rel(f)}")
            if why:
                for t in sorted(edges[f]):
                    if t in comp:
                        print(f"      -> {rel(t)}: {', '.join(sorted(edges[f][t]))}")
    problems = floor_check(modules, edges, rel) if "--floors" in sys.argv else []
    return 1 if found or problems else 0


if __name__ == "__main__":
    sys.exit(main())
