"""House rules the code must keep: runtime code never imports ``mirrorflow.dev`` (local
brokers, the Connect server, the demo) at import time, so a run on a real deployment
never loads development tooling."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "include" / "mirrorflow"


def top_level_imports(path: Path) -> set[str]:
    """Modules a file imports when it is imported (not inside functions)."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return out


def test_runtime_modules_never_import_the_dev_package() -> None:
    runtime = [p for p in PACKAGE.rglob("*.py") if "dev" not in p.relative_to(PACKAGE).parts]
    assert len(runtime) > 40
    offenders = {str(p.relative_to(PACKAGE)): sorted(m for m in top_level_imports(p)
                                                     if m.startswith("mirrorflow.dev"))
                 for p in runtime}
    assert {k: v for k, v in offenders.items() if v} == {}
