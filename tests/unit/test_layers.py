"""The package tree keeps its promises: one `lakemv` namespace, a core that needs no JVM, and
dependencies that point down (core <- catalog <- duck | spark <- flows | ops), read from the sources."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from lakemv.catalog.settings import PROJECT_ROOT

PACKAGES = ("core", "catalog", "duck", "spark", "flows", "ops", "workload")
# What each package may import of lakemv (besides itself); core is the pure layer.
ALLOWED = {
    "core": {"core", "catalog"},
    "catalog": {"core", "catalog"},
    "workload": {"core", "catalog", "workload"},
    "duck": {"core", "catalog", "duck"},
    "spark": {"core", "catalog", "duck", "spark"},  # duck: a backfill's audit is DuckDB's verify
    "flows": set(PACKAGES),
    "ops": set(PACKAGES),
}
JVM = ("pyspark", "py4j")
NO_JVM = ("core", "catalog", "duck", "workload")


def _modules(package: str) -> list[Path]:
    return sorted((PROJECT_ROOT / package).rglob("*.py"))


def _imports(path: Path) -> list[str]:
    """Every module `path` imports, at any depth (the CLI imports lazily, inside functions)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _python_files() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    return [PROJECT_ROOT / f for f in tracked.stdout.split()]


def test_pyproject_lists_every_package_folder():
    config = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"] == {f"lakemv.{p}": p for p in PACKAGES}
    folders = {
        "lakemv." + ".".join(init.parent.relative_to(PROJECT_ROOT).parts)
        for p in PACKAGES
        for init in (PROJECT_ROOT / p).rglob("__init__.py")
    }
    assert set(config["packages"]) == folders


@pytest.mark.parametrize("package", PACKAGES)
def test_dependencies_point_down(package):
    wrong = []
    for path in _modules(package):
        for name in _imports(path):
            top, _, rest = name.partition(".")
            if top == "lakemv" and rest.split(".")[0] not in ALLOWED[package]:
                wrong.append(f"{path.relative_to(PROJECT_ROOT)} imports {name}")
            if package in NO_JVM and top in JVM:
                wrong.append(f"{path.relative_to(PROJECT_ROOT)} imports {name} (no JVM here)")
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_a_folder_by_its_bare_name():
    """`import spark.x` would load a second copy of a module beside `lakemv.spark.x` (pytest puts the
    project root on sys.path): its own stop flag, crash points and classes. Scripts held in strings
    (the tests' child processes) count too."""
    bare = re.compile(rf"^\s*(?:from|import) (?:{'|'.join(PACKAGES)})(?:[. ]|$)", re.M)
    found = [f"{path.relative_to(PROJECT_ROOT)}: {m.group(0).strip()}" for path in _python_files() for m in bare.finditer(path.read_text())]
    assert not found, "\n".join(found)


def test_a_folder_imported_by_its_bare_name_refuses():
    code = f"import sys; sys.path.insert(0, {str(PROJECT_ROOT)!r}); import catalog"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "ImportError: import lakemv.catalog, not catalog" in done.stderr


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_says_what_it_owns(package):
    missing = [str(p.relative_to(PROJECT_ROOT)) for p in _modules(package) if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not missing, "modules without a docstring: " + ", ".join(missing)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_400_lines(package):
    long = {str(p.relative_to(PROJECT_ROOT)): n for p in _modules(package) if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"split these (a module owns one thing): {long}"
