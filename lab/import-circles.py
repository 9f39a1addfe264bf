#!/usr/bin/env python3
"""Finds import circles between the files of Rust crates: file A names an item of file B
while B names one of A, directly or round a longer loop.

Usage: import-circles.py SRC...  (each a crate's src directory; its lib.rs, main.rs and
bin/*.rs are each a crate root). Prints each circle with the line that makes each edge and
exits 1, or exits 0.

A name is what code refers to: `use` lines (grouped, nested, `self`/`super`/`crate`) and
paths anywhere in code (`crate::a::B`, `super::B`, `child::B`, `imported::B`), and bare
names brought in by `use` or a glob. An edge goes to the file that defines the item:
re-exports (`pub use`, globs too) are followed to their source, and a re-export alone is
no edge. `mod child;` is no edge; a parent naming its child's items is, as is a child
naming its parent's via `super::`. Comments, strings and `#[cfg(test)]` items are
skipped: test code may name anything. Workspace-level circles cargo itself forbids, so
each crate is checked alone."""
import os
import re
import sys
from collections import deque

KEYWORDS = {
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
    "extern", "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod",
    "move", "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super",
    "trait", "true", "type", "unsafe", "use", "where", "while", "union", "macro_rules",
}
# Keywords whose next identifier is a name being defined, not one referred to.
DEFINERS = {"fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
            "let", "macro_rules"}
ITEMS = {"fn", "struct", "enum", "trait", "type", "const", "static", "union", "macro_rules"}
IDENT = re.compile(r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*")
# Prefixed and raw string literals: b"..", c"..", r#".."#, br"..".
STR_START = re.compile(r'(?:b|c|br|cr|r)?(#*)"')


def tokenize(text):
    """(token, line) pairs of Rust source, without comments, strings and char literals
    (each string becomes one "STR" token, so item boundaries stay where they were)."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
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
                    line += text[i] == "\n"
                    i += 1
        elif (m := STR_START.match(text, i)) and (c == '"' or not _ident_before(text, i)):
            hashes, raw = m.group(1), "r" in text[i:m.end()]
            j = m.end()
            end = '"' + hashes
            while j < n and not text.startswith(end, j):
                if text[j] == "\\" and not raw:
                    j += 1
                j += 1
            line += text.count("\n", i, j)
            out.append(("STR", line))
            i = j + len(end)
        elif c == "'" or (c == "b" and text.startswith("b'", i)):
            j = i + 1 if c == "'" else i + 2
            if j < n and text[j] == "\\":  # escaped char literal
                k = text.find("'", j + 2)
                i = k + 1
                out.append(("STR", line))
            elif j + 1 < n and text[j + 1] == "'":  # 'x'
                i = j + 2
                out.append(("STR", line))
            else:  # a lifetime or label
                m = IDENT.match(text, j)
                i = m.end() if m else j
        elif m := IDENT.match(text, i):
            tok = m.group(0)
            out.append((tok[2:] if tok.startswith("r#") else tok, line))
            i = m.end()
        elif c.isdigit():
            m = re.compile(r"[0-9][0-9A-Za-z_]*(?:\.[0-9][0-9A-Za-z_]*)?").match(text, i)
            i = m.end()
        elif text.startswith("::", i):
            out.append(("::", line))
            i += 2
        else:
            out.append((c, line))
            i += 1
    return out


def _ident_before(text, i):
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


OPEN, CLOSE = "([{", ")]}"


def item_end(toks, i):
    """Index just past the item or statement that starts at toks[i]: its `;` or the `}`
    closing its first top-level `{`."""
    depth = 0
    while i < len(toks):
        t = toks[i][0]
        if t in OPEN:
            depth += 1
        elif t in CLOSE:
            depth -= 1
            if depth == 0 and t == "}":
                return i + 1
            if depth < 0:  # the enclosing block ended
                return i
        elif t == ";" and depth == 0:
            return i + 1
        i += 1
    return i


def attr_end(toks, i):
    """toks[i] is `#`: index just past its `[...]` (or `![...]`)."""
    j = i + 1
    if j < len(toks) and toks[j][0] == "!":
        j += 1
    depth = 0
    while j < len(toks):
        t = toks[j][0]
        if t in OPEN:
            depth += 1
        elif t in CLOSE:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return j


def is_test_cfg(attr):
    """attr: the tokens of one attribute. True for cfg(test) and cfg(all(test, ..))."""
    words = [t for t, _ in attr]
    if "cfg" not in words:
        return False
    k = words.index("cfg")
    inner = words[k + 1:]
    return inner[:3] == ["(", "test", ")"] or (
        inner[:3] == ["(", "all", "("] and _top_level_test(inner[3:]))


def _top_level_test(words):
    depth = 0
    for w in words:
        if w in OPEN:
            depth += 1
        elif w in CLOSE:
            if depth == 0:
                return False
            depth -= 1
        elif w == "test" and depth == 0:
            return True
    return False


def strip_test_code(toks):
    """The tokens less every item or statement under #[cfg(test)]; [] for a file whose
    inner attribute is #![cfg(test)]."""
    out, i = [], 0
    while i < len(toks):
        if toks[i][0] == "#":
            j = attr_end(toks, i)
            if is_test_cfg(toks[i:j]):
                if i + 1 < len(toks) and toks[i + 1][0] == "!":
                    return []
                while j < len(toks) and toks[j][0] == "#":  # further attributes
                    j = attr_end(toks, j)
                i = item_end(toks, j)
                continue
            out.extend(toks[i:j])
            i = j
            continue
        out.append(toks[i])
        i += 1
    return out


class Module:
    def __init__(self, name, parent, file, dir_):
        self.name, self.parent, self.file, self.dir = name, parent, file, dir_
        self.children = {}  # name -> Module
        self.items = set()  # names of items defined here
        self.macros = set()  # macro_rules! names
        self.bindings = {}  # local name -> [Use]
        self.globs = []  # [Use]
        self.uses = []  # every Use, function-local ones too
        self.refs = []  # (kind, segments, line): paths and bare names in code


class Use:
    def __init__(self, path, name, line, public, glob, module):
        self.path, self.name, self.line = path, name, line
        self.public, self.glob, self.module = public, glob, module


def parse_use_tree(toks, i, prefix, out):
    """Parses one use tree at toks[i]; appends (path, name, line, glob) to out; returns the
    index after it."""
    path = list(prefix)
    while i < len(toks):
        t, line = toks[i]
        if t == "::":
            i += 1
        elif t == "{":
            i += 1
            while i < len(toks) and toks[i][0] != "}":
                i = parse_use_tree(toks, i, path, out)
                if i < len(toks) and toks[i][0] == ",":
                    i += 1
            return i + 1
        elif t == "*":
            out.append((path, None, line, True))
            return i + 1
        elif IDENT.fullmatch(t):
            path.append(t)
            i += 1
            if i < len(toks) and toks[i][0] == "::":
                continue
            name = t
            if t == "self" and len(path) > 1:  # `a::{self}` binds a
                path.pop()
                name = path[-1]
            if i + 1 < len(toks) and toks[i][0] == "as":
                name = toks[i + 1][0]
                i += 2
            out.append((path, None if name == "_" else name, line, False))
            return i
        else:
            return i
    return i


def parse_module_tokens(mod, toks, files):
    """Fills mod (and its inline modules) from its tokens; declares file modules."""
    stack = [(mod, 0)]  # (module, brace depth of its body)
    depth, i, n = 0, 0, len(toks)
    while i < n:
        t, line = toks[i]
        cur, body = stack[-1]
        prev = toks[i - 1][0] if i else ""
        nxt = toks[i + 1][0] if i + 1 < n else ""
        if t == "{":
            depth += 1
        elif t == "}":
            if depth == body and len(stack) > 1:
                stack.pop()
            depth -= 1
        elif t == "#":  # attributes name no items of ours
            i = attr_end(toks, i)
            continue
        elif t == "pub" and nxt == "(":  # pub(crate), pub(in path): no reference
            j = i + 1
            while j < n and toks[j][0] != ")":
                j += 1
            i = j + 1
            continue
        elif t == "extern" and nxt == "crate":
            i = item_end(toks, i)
            continue
        elif t == "mod" and IDENT.fullmatch(nxt) and prev != "$":
            name = nxt
            after = toks[i + 2][0] if i + 2 < n else ""
            if after == ";":
                child = load_file_module(name, cur, files)
                if child:
                    cur.children[name] = child
                i += 3
                continue
            if after == "{":
                child = Module(name, cur, cur.file, os.path.join(cur.dir, name))
                cur.children[name] = child
                depth += 1
                stack.append((child, depth))
                i += 3
                continue
        elif t == "use" and prev not in ("::", "."):
            j = i + 1
            public = i > 0 and (prev == "pub" or (prev == ")" and _pub_paren_before(toks, i)))
            trees = []
            if j < n and toks[j][0] == "::":  # ::extern_crate
                i = item_end(toks, i)
                continue
            j = parse_use_tree(toks, j, [], trees)
            for path, name, uline, glob in trees:
                u = Use(path, name, uline, public, glob, cur)
                cur.uses.append(u)
                # A function's own imports count as the module's: scopes are not tracked.
                if glob:
                    cur.globs.append(u)
                elif name:
                    cur.bindings.setdefault(name, []).append(u)
            i = item_end(toks, i)
            continue
        elif depth == body and t in ITEMS and prev not in ("::", "."):
            if t == "macro_rules" and nxt == "!":
                nxt = toks[i + 2][0] if i + 2 < n else ""
                cur.macros.add(nxt)
            if IDENT.fullmatch(nxt) and nxt not in KEYWORDS:
                cur.items.add(nxt)
        if IDENT.fullmatch(t) and t != "Self" and prev not in ("::", ".", "$") \
                and prev not in DEFINERS and (t not in KEYWORDS or t in ("crate", "self", "super")):
            if nxt == "::":
                segs, j = [t], i + 1
                while j + 1 < n and toks[j][0] == "::" and IDENT.fullmatch(toks[j + 1][0]):
                    segs.append(toks[j + 1][0])
                    j += 2
                cur.refs.append(("path", segs, line))
                i = j
                continue
            if t not in KEYWORDS and nxt != ":":  # `name:` declares a field or binding
                cur.refs.append(("name", [t], line))
        i += 1


def _pub_paren_before(toks, i):
    """toks[i-1] is `)`: whether it closes a `pub(...)`."""
    j = i - 1
    while j > 0 and toks[j][0] != "(":
        j -= 1
    return j > 0 and toks[j - 1][0] == "pub"


def load_file_module(name, parent, files):
    for cand in (os.path.join(parent.dir, name + ".rs"), os.path.join(parent.dir, name, "mod.rs")):
        if os.path.isfile(cand):
            d = os.path.dirname(cand) if cand.endswith("mod.rs") else cand[:-3]
            return load_module(name, parent, cand, d, files)
    return None


def load_module(name, parent, file, dir_, files):
    with open(file, encoding="utf-8") as f:
        text = f.read()
    toks = tokenize(text)
    files[file] = text.splitlines()
    mod = Module(name, parent, file, dir_)
    parse_module_tokens(mod, strip_test_code(toks), files)
    return mod


class Crate:
    def __init__(self, root_file):
        self.files = {}  # file -> its lines
        self.root = load_module("crate", None, root_file, os.path.dirname(root_file), self.files)
        # #[macro_export] macros are named `crate::m!` wherever they are defined.
        self.macros = {m: mod.file for mod in self.modules() for m in mod.macros}
        self.edges = {}  # file -> {file: [lines]}

    # Resolution. A result is ("mod", Module), ("item", file) or None (not ours).
    def resolve(self, mod, segs, seen):
        first = segs[0]
        if first == "crate":
            cur, rest = ("mod", self.root), segs[1:]
        elif first in ("self", "super"):
            m, k = mod, 0
            if first == "self":
                k = 1
            while k < len(segs) and segs[k] == "super":
                m, k = m.parent, k + 1
                if m is None:
                    return None
            cur, rest = ("mod", m), segs[k:]
        else:
            cur, rest = self.lookup(mod, first, len(segs) > 1, seen), segs[1:]
        for k, seg in enumerate(rest):
            if cur is None or cur[0] == "item":  # an item's associated name, or not ours
                return cur
            found = self.lookup(cur[1], seg, k + 1 < len(rest), seen)
            # A name this module holds that we cannot see (a macro's): the module's file.
            cur = found or ("item", self.glob_fallback(cur[1]))
        return cur

    def glob_fallback(self, mod):
        for g in mod.globs:
            if g.public:
                r = self.resolve(mod, g.path, set())
                if r and r[0] == "mod":
                    return r[1].file
        return mod.file

    def lookup(self, mod, name, want_mod, seen):
        """What `name` means inside mod: a child module, an item, an import, a glob's."""
        key = (id(mod), name, want_mod)
        if key in seen:
            return None
        seen = seen | {key}
        child = mod.children.get(name)
        if child and (want_mod or name not in mod.items):
            return ("mod", child)
        if name in mod.items:
            return ("item", mod.file)
        for u in mod.bindings.get(name, ()):
            r = self.resolve(u.module, u.path, seen)
            if r:
                return r
        for g in mod.globs:
            target = self.resolve(g.module, g.path, seen)
            if target and target[0] == "mod":
                r = self.lookup(target[1], name, want_mod, seen)
                if r:
                    return r
        if mod is self.root and name in self.macros:
            return ("item", self.macros[name])
        return None

    def add_edge(self, mod, target, line):
        if target:
            file = target[1] if target[0] == "item" else target[1].file
            if file != mod.file:
                self.edges.setdefault(mod.file, {}).setdefault(file, set()).add(line)

    def modules(self, mod=None):
        mod = mod or self.root
        yield mod
        for c in mod.children.values():
            yield from self.modules(c)

    def build(self):
        for mod in self.modules():
            self.edges.setdefault(mod.file, {})
            for u in mod.uses:
                # A re-export is an alias, and a module imported by name is an edge only
                # where its items are named; a private glob is one to its module.
                if u.public:
                    continue
                r = self.resolve(mod, u.path, set())
                if r and (r[0] == "item" or u.glob):
                    self.add_edge(mod, r, u.line)
            for kind, segs, line in mod.refs:
                if kind == "path":
                    self.add_edge(mod, self.resolve(mod, segs, set()), line)
                    continue
                name = segs[0]
                if name in mod.items or name in mod.children:
                    continue
                r = self.lookup(mod, name, False, set())
                if r and r[0] == "item":
                    self.add_edge(mod, r, line)
        return self.edges


def sccs(g):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def strong(v):
        work = [(v, iter(sorted(g.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    out.append(comp)
    for v in sorted(g):
        if v not in index:
            strong(v)
    return out


def shortest_path(g, start, goal, allowed):
    prev, q = {start: None}, deque([start])
    while q:
        v = q.popleft()
        if v == goal:
            path = []
            while v is not None:
                path.append(v)
                v = prev[v]
            return path[::-1]
        for w in sorted(g.get(v, ())):
            if w in allowed and w not in prev:
                prev[w] = v
                q.append(w)
    return None


def circles(g):
    """Circles covering every edge that lies on one: per edge not yet shown, the shortest
    circle through it. Each is a list of files, first repeated at the end."""
    out, seen = [], set()
    for comp in sccs(g):
        members = set(comp)
        if len(comp) < 2:
            continue
        covered = set()
        for a in sorted(comp):
            for b in sorted(g[a]):
                if b not in members or (a, b) in covered:
                    continue
                back = shortest_path(g, b, a, members)
                cyc = [a] + back
                k = cyc.index(min(cyc[:-1]))  # one rotation per circle
                canon = tuple(cyc[k:-1] + cyc[:k])
                covered.update(zip(cyc, cyc[1:]))
                if canon not in seen:
                    seen.add(canon)
                    out.append(list(canon) + [canon[0]])
    return out


def crate_roots(src):
    roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs")]
    bins = os.path.join(src, "bin")
    if os.path.isdir(bins):
        for f in sorted(os.listdir(bins)):
            p = os.path.join(bins, f)
            roots.append(p if f.endswith(".rs") else os.path.join(p, "main.rs"))
    return [r for r in roots if os.path.isfile(r)]


def check(src, out=sys.stdout):
    """Prints src's circles; returns how many."""
    found = 0
    for root in crate_roots(src):
        crate = Crate(root)
        g = crate.build()
        for cyc in circles(g):
            found += 1
            rel = lambda f: os.path.relpath(f, src)
            print(f"{src}: import circle: " + " -> ".join(rel(f) for f in cyc), file=out)
            for a, b in zip(cyc, cyc[1:]):
                lines = sorted(g[a][b])
                text = crate.files[a][lines[0] - 1].strip()
                more = ", ".join(map(str, lines[1:9])) + (", ..." if lines[9:] else "")
                more = f"  (also line {more})" if more else ""
                print(f"    {os.path.join(src, rel(a))}:{lines[0]}: {text}  -> {rel(b)}{more}", file=out)
    return found


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    found = sum(check(src) for src in argv)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
