#!/usr/bin/env python3
"""Finds import circles between the files of Rust crates: file A uses an item of file B
(`use crate::..`, `use super::..`, `use child::..`) while B uses one of A, directly or
round a longer loop. Re-exports (`pub use`) are not uses. Usage: import-circles.py SRC...
(each a crate's src directory); prints one line per circle and exits 1, or exits 0."""
import os, re, sys

def module_file(root, parts):
    """The file that holds module path `parts` (relative to the crate's src)."""
    for n in range(len(parts), 0, -1):
        base = os.path.join(root, *parts[:n])
        for cand in (base + ".rs", os.path.join(base, "mod.rs")):
            if os.path.isfile(cand):
                return cand
    # An item of the crate root.
    for cand in ("lib.rs", "main.rs"):
        if os.path.isfile(os.path.join(root, cand)):
            return os.path.join(root, cand)
    return None

def mod_path(root, f):
    rel = os.path.relpath(f, root)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel

def edges(root):
    out = {}
    for d, _, fs in os.walk(root):
        for name in fs:
            if not name.endswith(".rs"):
                continue
            f = os.path.join(d, name)
            text = open(f).read()
            text = text.split("#[cfg(test)]")[0]
            here = mod_path(root, f)
            deps = set()
            children = {os.path.basename(x)[:-3] if x.endswith(".rs") else x
                        for x in os.listdir(d)} if name in ("lib.rs", "main.rs", "mod.rs") else set()
            # A re-export (`pub use`) shows a module's items from its parent; it is not a use.
            text = re.sub(r"\bpub(\([^)]*\))?\s+use\b[^;]*;", "", text)
            for m in re.finditer(r"\buse\s+((?:crate|super|self|\w+)(?:::\w+)*)(?:::\{([^;]*)\})?", text):
                path = m.group(1).split("::")
                if path[0] == "self":
                    path = ["crate"] + here + path[1:]
                elif path[0] not in ("crate", "super"):
                    if path[0] not in children:
                        continue
                    path = ["crate"] + here + path
                names = [n.strip().split("::")[0] for n in (m.group(2) or "").split(",") if n.strip()]
                if path[0] == "crate":
                    base = path[1:]
                else:
                    base = list(here)
                    for p in path:
                        if p == "super":
                            base = base[:-1]
                        else:
                            base.append(p)
                targets = [base + [n] for n in names if n != "self"] or [base]
                for t in targets:
                    target = module_file(root, t)
                    if target and target != f:
                        deps.add(target)
            out[f] = deps
    return out

def cycles(g):
    found, state, stack = [], {}, []
    def visit(n):
        state[n] = 1; stack.append(n)
        for m in g.get(n, ()):
            if state.get(m) == 1:
                found.append(stack[stack.index(m):] + [m])
            elif m not in state:
                visit(m)
        stack.pop(); state[n] = 2
    for n in g:
        if n not in state:
            visit(n)
    return found

found = 0
for root in sys.argv[1:]:
    for c in cycles(edges(root)):
        found += 1
        print(f"{root}: import circle: " + " -> ".join(os.path.relpath(x, root) for x in c))
sys.exit(1 if found else 0)
