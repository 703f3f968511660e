"""The documentation: the site builds with warnings as errors (``mkdocs.yml``'s ``strict`` and
``validation``: a relative link to a missing page or anchor, or a page left out of the nav,
fails it) without importing Spark or Airflow; every public name of the package has an entry in
the API pages; every Python snippet of README.md and docs/ compiles; README stays a short front
page whose example DAG parses into a DAG with Airflow."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "airflow_provider_kafka_spark"
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# The public modules the API reference covers: each one's __all__, or (without one) the
# classes, functions and constants it defines at the top level that are not private.
PUBLIC_MODULES = ("offsets", "spark", "sinks", "decoding", "shaping", "errors", "operators",
                  "sensors", "triggers", "hooks", "assets", "naming")
# A ```python block that is deliberately a fragment is marked on the line before it.
PARTIAL = "<!-- snippet: partial -->"
FENCE = re.compile(r"^```python\s*$(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
ENTRY = re.compile(r"^::: (\S+)", re.MULTILINE)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_site_builds_strict_without_importing_spark_or_airflow(tmp_path: Path) -> None:
    code = ("import sys\n"
            "from mkdocs.commands.build import build\n"
            "from mkdocs.config import load_config\n"
            f"build(load_config({str(ROOT / 'mkdocs.yml')!r}, strict=True, "
            f"site_dir={str(tmp_path / 'site')!r}))\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'pyspark', 'airflow', 'confluent_kafka', 'pyarrow', "
            f"{PACKAGE!r}}}))\n")
    built = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-4000:]
    assert built.stdout.strip().splitlines()[-1] == "[]"  # griffe read the source, imported none
    assert (tmp_path / "site" / "api" / "offsets" / "index.html").exists()


def _source(module: str) -> Path:
    path = ROOT / PACKAGE / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _public_names(module: str) -> dict[str, str]:
    """The module's public names, each with the module it is defined in (where an import
    statement, also one under ``if TYPE_CHECKING:``, says so; else the module itself)."""
    tree = ast.parse(_source(module).read_text())
    origin: dict[str, str] = {}
    listed: list[str] | None = None
    defined: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                origin[alias.asname or alias.name] = node.module.removeprefix(f"{PACKAGE}.")
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if "__all__" in names:
                listed = list(ast.literal_eval(node.value))
            else:
                defined += names
    defined += [n.name for n in tree.body
                if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
    names = listed if listed is not None else [n for n in defined if not n.startswith("_")]
    return {name: origin.get(name, module) for name in names}


def test_every_public_name_has_an_api_entry() -> None:
    entries = {m.removeprefix(f"{PACKAGE}.")
               for page in (DOCS / "api").glob("*.md") for m in ENTRY.findall(page.read_text())}
    missing = []
    for module in PUBLIC_MODULES:
        names = _public_names(module)
        assert names, module
        for name, origin in names.items():
            # An entry for the name where it is exported or where it is defined (a re-exported
            # error is on the errors page), or one for either whole module.
            if not {f"{module}.{name}", f"{origin}.{name}", module, origin} & entries:
                missing.append(f"{module}.{name}")
    assert missing == [], f"no ::: entry in docs/api/*.md for {missing}"


def _snippets(path: Path) -> list[tuple[int, str, bool]]:
    """``(line, code, partial)`` of each ```python block of ``path``."""
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        found.append((text.count("\n", 0, match.start()) + 2, match.group(1), before == PARTIAL))
    return found


def test_every_python_snippet_compiles() -> None:
    files = [README, *sorted(DOCS.rglob("*.md"))]
    checked, failed = 0, []
    for path in files:
        for line, code, partial in _snippets(path):
            if partial:
                continue
            try:
                compile(code, f"{path.relative_to(ROOT)}:{line}", "exec")
            except SyntaxError as exc:
                failed.append(f"{path.relative_to(ROOT)}:{line + (exc.lineno or 1) - 1}: {exc.msg}")
            checked += 1
    assert failed == []
    assert checked >= 20


def test_readme_is_a_short_front_page_whose_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    commands = text[text.index("## The two commands"):]
    block = commands[commands.index("```bash"):commands.index("```\n", 8)]
    assert [line.split("#")[0].strip() for line in block.splitlines()[1:]] == [
        "make demo", "make test"]
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")
    assert not re.search(r"\b\d+(\.\d+)? min(utes)?\b.*\b(on|at) (20\d\d-|[0-9a-f]{7}\b)", text)
    for target in LINK.findall(text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_the_readme_dag_parses_into_a_dag(tmp_path: Path) -> None:
    code = _snippets(README)[0][1]
    assert 15 <= len(code.strip().splitlines()) <= 30
    probe = (code + "\ntasks = [v for v in list(globals().values()) if hasattr(v, 'task_id')]\n"
             "print(sorted({(t.dag.dag_id, tuple(sorted(t.dag.task_ids))) for t in tasks}))\n")
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}"}
    parsed = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert parsed.returncode == 0, parsed.stderr[-4000:]
    assert parsed.stdout.strip().splitlines()[-1] == \
        "[('events_hourly', ('ingest', 'resolve_offsets'))]"
