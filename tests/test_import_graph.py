"""The package's import graph (scripts/import_graph.py): no circle, no private name imported from
another module, no import of our modules inside a function without a reason. Reads the source
with ast; imports nothing of ggufspec, so it runs in well under a second."""

from __future__ import annotations

import textwrap
from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parents[1]
graph = load_script("import_graph")


def test_the_package_has_no_import_circle() -> None:
    assert graph.analyze(ROOT).cycles == []


def test_no_private_name_is_imported_from_another_module() -> None:
    assert [graph._describe(imp) for imp in graph.analyze(ROOT).private] == []


def test_every_import_inside_a_function_has_a_reason() -> None:
    report = graph.analyze(ROOT)
    assert [graph._describe_statement(imps) for imps in report.undeliberate] == []
    assert report.inner  # the CLI's and the llama_cpp ones stay where they are


def test_the_check_finds_each_fault(tmp_path: Path) -> None:
    files = {
        "ggufspec/__init__.py": "__version__ = '0'\n",
        "ggufspec/a.py": """
            from ggufspec import __version__
            from ggufspec.b import _hidden

            def f():
                from ggufspec.b import g  # pure -> pure: belongs at module level
                return g

            def h():
                from ggufspec.heavy import x  # defers numpy: deliberate
                return x
        """,
        "ggufspec/b.py": """
            def g():
                from ggufspec.a import f  # a circle, however it is hidden
                return f

            _hidden = 1
        """,
        "ggufspec/heavy.py": "import numpy\nx = 1\n",
        "ggufspec/commands/__init__.py": "",
        "ggufspec/commands/run.py": "def run():\n    from ggufspec.b import g\n    return g\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    report = graph.analyze(tmp_path)
    assert report.cycles == [["ggufspec.a", "ggufspec.b"]]
    assert [(i.importer, i.names) for i in report.private] == [("ggufspec.a", ("_hidden",))]  # not __version__
    whys = {(imps[0].importer, imps[0].target): why for imps, why in report.inner}
    assert whys[("ggufspec.a", "ggufspec.b")] == ""
    assert whys[("ggufspec.b", "ggufspec.a")] == ""
    assert whys[("ggufspec.a", "ggufspec.heavy")] == "defers numpy"
    assert whys[("ggufspec.commands.run", "ggufspec.b")].startswith("the CLI")
    assert not report.ok
