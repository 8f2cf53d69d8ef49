"""The public API under semantic versioning, as names: every public class, function and constant of
`statecert.spec`'s modules with the public members of its classes (the protocols a backend implements), the
authoring kit's `__all__` with the public members of its classes, and the pytest plugin's `--statecert-*` options
and markers. `tests/test_api_surface.py` compares it with the committed `tests/api_surface.json`; after a
deliberate change (a new name, or a removal once its deprecation period is over), `python -m tests.api_surface`
writes the file anew."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType

SNAPSHOT = Path(__file__).resolve().parent / "api_surface.json"
PLUGIN = Path(__file__).resolve().parent.parent / "conformance" / "plugin.py"


def _members(owner: type) -> list[str]:
    return sorted(n for n in vars(owner) if not n.startswith("_") or n in ("__enter__", "__exit__", "__init__"))


def _public(module: ModuleType, names: list[str]) -> dict[str, list[str]]:
    out = {}
    for name in names:
        obj = getattr(module, name)
        out[name] = _members(obj) if inspect.isclass(obj) else []
    return out


def api_surface() -> dict[str, dict[str, list[str]]]:
    import statecert.spec

    surface: dict[str, dict[str, list[str]]] = {}
    for info in pkgutil.iter_modules(statecert.spec.__path__):
        module = importlib.import_module(f"statecert.spec.{info.name}")
        names = [
            n
            for n, obj in vars(module).items()
            if not n.startswith("_")
            and getattr(obj, "__module__", module.__name__) == module.__name__
            and not inspect.ismodule(obj)
        ]
        surface[module.__name__] = _public(module, sorted(names))
    authoring = importlib.import_module("statecert.reference.authoring")
    surface[authoring.__name__] = _public(authoring, sorted(authoring.__all__))
    source = PLUGIN.read_text(encoding="utf-8")
    surface["statecert.conformance.plugin"] = {
        "options": sorted(set(re.findall(r"\"(--statecert-[a-z-]+)\"", source))),
        "markers": sorted(set(re.findall(r"\"markers\",\s*\"([a-z_]+)[(:]", source))),
    }
    return surface


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(api_surface(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
