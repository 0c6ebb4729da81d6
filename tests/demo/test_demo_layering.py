"""Production code imports nothing from the demo app: the import-linter contract
`demo-protected` of pyproject.toml holds for the code, and really catches what it forbids
(in a stub tree of our packages' names)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BASE = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(cwd)},
    )


def test_the_demo_contract_is_kept_by_the_code():
    result = lint_imports(BASE, "--contract", "demo-protected")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Nothing imports demo but demo itself, settings and URLs KEPT" in result.stdout


def write_tree(root: Path, imports: dict[str, str]) -> None:
    """Packages named like ours, each module importing what `imports` says."""
    for package in ("common", "watches", "outbox", "yasugoro", "demo", "monitoring"):
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")
    for module, source in imports.items():
        path = root / (module.replace(".", "/") + ".py")
        for folder in path.relative_to(root).parents[:-2]:
            (root / folder).mkdir(exist_ok=True)
            (root / folder / "__init__.py").touch()
        path.write_text(source + "\n")
    shutil.copy(BASE / "pyproject.toml", root / "pyproject.toml")


ALLOWED = {
    "demo.market": "import watches.polling.poll",
    "demo.tasks": "from demo.market import tick",
    "watches.polling.poll": "",
    "yasugoro.settings": "import demo.market",
    "yasugoro.urls": "from demo import tasks",
}


def test_the_demo_contract_allows_demo_settings_and_urls(tmp_path):
    write_tree(tmp_path, ALLOWED)
    result = lint_imports(tmp_path, "--contract", "demo-protected")
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize(
    ("importer", "source"),
    [
        ("watches.tasks", "from demo.market import tick"),
        ("outbox.dispatch", "import demo"),
        ("yasugoro.schedules", "from demo import tasks"),
    ],
)
def test_the_demo_contract_breaks_when_production_code_imports_demo(tmp_path, importer, source):
    write_tree(tmp_path, {**ALLOWED, importer: source})
    result = lint_imports(tmp_path, "--contract", "demo-protected")
    assert result.returncode == 1
    assert "Nothing imports demo but demo itself, settings and URLs BROKEN" in result.stdout
    assert f"{importer} -> demo" in result.stdout
