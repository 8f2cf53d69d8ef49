"""The capability manifest: what a backend declares it supports, by behaviour name (SB-2).

Like SQLAlchemy's `testing/requirements.py`, each capability is a documented declaration, and every test names
the capabilities it uses. A test marked `@pytest.mark.capability("rescaling", "operator_state")` runs only when
the backend declares both; one marked `@pytest.mark.capability("ttl", supported=False)` runs only when it
declares TTL unsupported, and asserts the documented error (SB-3). Naming a capability that does not exist is an
error, never a silent skip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields, replace
from typing import Any

from statecert.spec.backend import BackendCapabilities

CAPABILITY_DOCS: dict[str, str] = {
    "async_snapshots": "the snapshot's asynchronous part may run in another thread while the backend keeps writing",
    "incremental_checkpoints": "checkpoints may reference state files of earlier checkpoints",
    "canonical_savepoints": "writes and restores the backend-independent canonical savepoint format",
    "native_savepoint_format": "the format tag of its native savepoints (None: native savepoints are canonical)",
    "rescaling": "restores state written at another parallelism",
    "operator_state": "provides split, union and broadcast operator state",
    "ttl": "supports state time-to-live",
    "schema_evolution": "migrates or reconfigures serializers of restored state",
    "timers": "keeps event-time and processing-time timers per key and namespace with the keyed state",
}
KNOWN = frozenset(CAPABILITY_DOCS)
assert {f.name for f in fields(BackendCapabilities)} == KNOWN, "every capability field must be documented"


class UnknownCapabilityError(ValueError):
    """A capability name that the manifest does not define."""


def check_name(name: str, where: str) -> str:
    if name not in KNOWN:
        raise UnknownCapabilityError(f"{where}: unknown capability {name!r}; known capabilities: {sorted(KNOWN)}")
    return name


def declared(backend: Any) -> BackendCapabilities:
    """The backend's manifest; a backend without one is assumed to declare the defaults."""
    capabilities = getattr(backend, "capabilities", None)
    if capabilities is None:
        return BackendCapabilities()
    if not isinstance(capabilities, BackendCapabilities):
        raise UnknownCapabilityError(f"capabilities must be a BackendCapabilities, got {type(capabilities).__name__}")
    return capabilities


def with_overrides(capabilities: BackendCapabilities, overrides: Mapping[str, Any], where: str) -> BackendCapabilities:
    """Settings may narrow the manifest (e.g. `[tool.statecert.capabilities] ttl = false`). A value of another type
    is refused: the string "false" is true in Python, so `ttl = "false"` would have left the TTL tests on while the
    certificate printed it as the override."""
    values: dict[str, Any] = {}
    for name, value in overrides.items():
        check_name(name, where)
        if name == "native_savepoint_format":
            if value is not False and not (isinstance(value, str) and value.strip()):
                raise UnknownCapabilityError(
                    f"{where}: {name} must be the format's name or false (none), got {value!r}"
                )
            values[name] = value or None
        elif not isinstance(value, bool):
            raise UnknownCapabilityError(f"{where}: {name} must be true or false, got {value!r}")
        else:
            values[name] = value
    return replace(capabilities, **values)


def supports(capabilities: BackendCapabilities, name: str) -> bool:
    value = getattr(capabilities, check_name(name, "capability marker"))
    return bool(value) if name != "native_savepoint_format" else value is not None


def missing(capabilities: BackendCapabilities, names: tuple[str, ...], wanted: bool = True) -> list[str]:
    """The named capabilities whose declaration is not `wanted`: a test runs only when this is empty."""
    return [name for name in names if supports(capabilities, name) != wanted]


def as_dict(capabilities: BackendCapabilities) -> dict[str, Any]:
    return asdict(capabilities)
