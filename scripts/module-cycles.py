#!/usr/bin/env python3
"""Fails when a crate's modules depend on each other in a cycle.

    scripts/module-cycles.py [REPOSITORY_ROOT]

A module depends on another when it names it by path (`crate::a::b`, `super::x`, `self::y`)
or names an item the crate root or a module re-exports from it (`crate::Error`, resolved
through `pub use error::Error`). A module and the modules inside it are not counted as
depending on each other. Test modules (`#[cfg(test)] mod tests`) and comments are left out.
Prints each cycle with its edges; exits 1 if there is one.
"""
import os
import re
import sys


def module_name(src, path):
    parts = os.path.relpath(path, src)[:-3].split(os.sep)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return "::".join(parts)


def source(path):
    text = re.sub(r"//[^\n]*", "", open(path, encoding="utf-8").read())
    return re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]


def cycles(src):
    modules = {}
    for folder, _, files in os.walk(src):
        for name in files:
            if name.endswith(".rs"):
                path = os.path.join(folder, name)
                modules[module_name(src, path)] = path
    names = set(modules)
    reexports = {}
    for module, path in modules.items():
        base = module.split("::") if module else []
        for found in re.finditer(
            r"pub(?:\([a-z]+\))? use ([a-z_0-9:]+?)::(\{[^}]*\}|[A-Za-z_0-9]+);", source(path)
        ):
            segments = found.group(1).split("::")
            head, rest = segments[0], segments[1:]
            target = {"crate": rest, "self": base + rest, "super": base[:-1] + rest}.get(
                head, base + segments
            )
            for item in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", found.group(2)):
                reexports[(module, item)] = "::".join(target)
    edges = {module: set() for module in modules}
    for module, path in modules.items():
        base = module.split("::") if module else []
        for found in re.finditer(
            r"\b(crate|super|self)((?:::\{?[A-Za-z_][A-Za-z0-9_]*)+)", source(path)
        ):
            head = found.group(1)
            segments = [s.strip("{") for s in found.group(2).split("::") if s]
            start = {"crate": [], "super": base[:-1], "self": base}[head]
            current, target = list(start), None
            for segment in segments:
                if "::".join(current + [segment]) in names:
                    current.append(segment)
                    target = "::".join(current)
                else:
                    break
            rest = segments[len(current) - len(start):]
            key = ("::".join(current), rest[0] if rest else None)
            if key in reexports and reexports[key] in names:
                target = reexports[key]
            if target is None or not target or not module:
                continue
            nested = module.startswith(target + "::") or target.startswith(module + "::")
            if target != module and not nested:
                edges[module].add(target)
    # Tarjan's strongly connected components.
    index, low, stack, on_stack, found_cycles = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found_cycles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return [(c, [(a, b) for a in c for b in sorted(edges[a]) if b in c]) for c in found_cycles]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    sources = [os.path.join(root, "crates", d, "src") for d in sorted(os.listdir(os.path.join(root, "crates")))]
    sources += [os.path.join(root, "src"), os.path.join(root, "python", "src")]
    status = 0
    for src in sources:
        for component, edges in cycles(src):
            status = 1
            print(f"{os.path.relpath(src, root)}: modules in a cycle: {', '.join(component)}")
            for a, b in edges:
                print(f"    {a} -> {b}")
    if status == 0:
        print("no module cycles")
    return status


if __name__ == "__main__":
    sys.exit(main())
