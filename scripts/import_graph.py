"""The package's import graph: circles, private names across modules, imports inside functions.

    python scripts/import_graph.py            # from the repository root: a report, exit 1 on a fault
    python scripts/import_graph.py --inner    # also list every import inside a function, and why

It reads ``ggufspec/**/*.py`` with ``ast`` (nothing is imported) and checks three rules
(tests/test_import_graph.py runs the same check):

1. No import circle between our modules. Every ``import``/``from ... import`` of ``ggufspec.*``
   is an edge, wherever it sits (module level, inside a function, under ``TYPE_CHECKING``): an
   import inside a function only delays a circle, it does not break it.
2. No private name (``_x``, not a dunder such as ``__version__``) imported from another module:
   what two modules share is public.
3. An import of our own modules inside a function must be deliberate, for one of two reasons:

   - the importer is the CLI's dispatcher or a subcommand (``ggufspec.cli``,
     ``ggufspec.commands.*``): ``ggufspec <cmd> --help`` imports only the argument definitions;
   - it defers a third-party package (llama_cpp, numpy, huggingface_hub, fastapi, matplotlib,
     rich, ...: anything outside the standard library) that the importer's own module-level
     imports do not already load, so ``import ggufspec`` and the pure modules stay light and an
     optional extra is needed only by the code that uses it.

   Any other import inside a function (a pure module importing a pure module) is a fault: it
   belongs at module level.

Parent packages count: importing ``ggufspec.plan.memory`` runs ``ggufspec/plan/__init__.py``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "ggufspec"
# the importers whose inner imports are the CLI's deliberate laziness
DISPATCH = ("ggufspec.cli", "ggufspec.commands")


@dataclass(frozen=True)
class Import:
    importer: str  # module name
    target: str  # our module the statement imports (a submodule where a name is one)
    names: tuple[str, ...]  # names imported from target (empty for `import x`)
    line: int
    inner: bool  # inside a function
    typing_only: bool = False  # under `if TYPE_CHECKING:`: an edge, but nothing runs it


@dataclass
class Module:
    name: str
    path: Path
    imports: list[Import] = field(default_factory=list)
    third_party: set[str] = field(default_factory=set)  # top-level names imported at module level


@dataclass
class Report:
    cycles: list[list[str]]
    private: list[Import]
    inner: list[tuple[list[Import], str]]  # (one statement's imports, why: "" where it is not deliberate)

    @property
    def undeliberate(self) -> list[list[Import]]:
        return [imps for imps, why in self.inner if not why]

    @property
    def ok(self) -> bool:
        return not self.cycles and not self.private and not self.undeliberate


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _inner_nodes(tree: ast.AST) -> set[int]:
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    inner.add(id(sub))
    return inner


def _typing_nodes(tree: ast.AST) -> set[int]:
    typing: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                for sub in ast.walk(stmt):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        typing.add(id(sub))
    return typing


def _is_ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def read_modules(root: Path) -> dict[str, Module]:
    """Every module under root/ggufspec, with its imports."""
    paths = sorted((root / PACKAGE).rglob("*.py"))
    modules = {module_name(p, root): Module(module_name(p, root), p) for p in paths}
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for mod in modules.values():
        tree = ast.parse(mod.path.read_text(encoding="utf-8"), filename=str(mod.path))
        inner = _inner_nodes(tree)
        typing = _typing_nodes(tree)
        package = mod.name if mod.path.name == "__init__.py" else mod.name.rpartition(".")[0]
        for node in ast.walk(tree):
            is_inner = id(node) in inner
            lazy = is_inner or id(node) in typing  # imports that `import this module` does not run
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _is_ours(alias.name):
                        mod.imports.append(Import(mod.name, alias.name, (), node.lineno, is_inner, id(node) in typing))
                    elif not lazy and alias.name.split(".")[0] not in stdlib:
                        mod.third_party.add(alias.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    source = ".".join(base + ([source] if source else []))
                if _is_ours(source):
                    for alias in node.names:
                        sub = f"{source}.{alias.name}"
                        target = sub if sub in modules else source
                        names = () if sub in modules else (alias.name,)
                        mod.imports.append(Import(mod.name, target, names, node.lineno, is_inner, id(node) in typing))
                elif not lazy and source.split(".")[0] not in stdlib:
                    mod.third_party.add(source.split(".")[0])
    return modules


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def loads(modules: dict[str, Module], start: str) -> tuple[set[str], set[str]]:
    """What `import start` runs: (our modules, third-party packages), module-level imports only."""
    seen: set[str] = set()
    third: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        for n in [*_parents(name), name]:
            if n in seen or n not in modules:
                continue
            seen.add(n)
            third |= modules[n].third_party
            todo.extend(imp.target for imp in modules[n].imports if not (imp.inner or imp.typing_only))
    return seen, third


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted({i.target for i in mod.imports if i.target in modules and i.target != m}) for m, mod in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            recurse = False
            for j in range(i, len(edges[v])):
                w = edges[v][j]
                if w not in index:
                    work.append((v, j + 1))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return sorted(found)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def analyze(root: Path) -> Report:
    modules = read_modules(root)
    private = [
        imp
        for mod in modules.values()
        for imp in mod.imports
        if imp.target != imp.importer and any(_is_private(n) for n in imp.names)
    ]
    inner: list[tuple[list[Import], str]] = []
    for mod in modules.values():
        _, own_third = loads(modules, mod.name)
        statements: dict[int, list[Import]] = {}
        for imp in mod.imports:
            if imp.inner:
                statements.setdefault(imp.line, []).append(imp)
        for line in sorted(statements):
            imps = statements[line]
            if mod.name.startswith(DISPATCH):
                why = "the CLI: a subcommand's imports wait for its run"
            else:
                deferred = [loads(modules, imp.target)[1] - own_third for imp in imps]
                # every name of the statement must defer something (else split the statement)
                why = f"defers {', '.join(sorted(set().union(*deferred)))}" if all(deferred) else ""
            inner.append((imps, why))
    return Report(cycles(modules), private, inner)


def _describe(imp: Import) -> str:
    what = f"from {imp.target} import {', '.join(imp.names)}" if imp.names else f"import {imp.target}"
    return f"{imp.importer}:{imp.line}: {what}"


def _describe_statement(imps: list[Import]) -> str:
    return f"{imps[0].importer}:{imps[0].line}: " + "; ".join(_describe(i).split(": ", 1)[1] for i in imps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="repository root")
    parser.add_argument("--inner", action="store_true", help="list every import inside a function, and why")
    args = parser.parse_args(argv)
    report = analyze(args.root)
    print(f"cycles: {len(report.cycles)}")
    for comp in report.cycles:
        print("  " + " <-> ".join(comp))
    print(f"private names imported across modules: {len(report.private)}")
    for imp in report.private:
        print("  " + _describe(imp))
    print(f"imports of our modules inside functions: {len(report.inner)} ({len(report.undeliberate)} not deliberate)")
    for imps, why in report.inner:
        if args.inner or not why:
            print(f"  {_describe_statement(imps)}  [{why or 'NOT DELIBERATE: move it to module level'}]")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
