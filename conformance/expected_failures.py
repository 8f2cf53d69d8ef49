"""Known bugs of the backend under test, as strict expected failures keyed by test id.

The file is TOML: `[expected-failures]` maps a test id (`<module>::<test name>`, e.g.
`test_keyed_state::test_clear_leaves_no_entry[map]`) to the reason. A listed test that passes fails the run
(strict xfail); an entry that matches no collected test is reported as stale and fails the run too.
"""

from __future__ import annotations

import sys
from pathlib import Path

from statecert.conformance.settings import SettingsError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def load_expected_failures(path: str) -> dict[str, str]:
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError(f"{path}: expected-failures file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read the expected-failures file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: invalid TOML: {exc}") from None
    entries = data.get("expected-failures")
    if not isinstance(entries, dict) or set(data) - {"expected-failures"}:
        raise SettingsError(f"{path}: expected a single [expected-failures] table of test id = reason")
    bad = [k for k, v in entries.items() if not isinstance(v, str) or not v.strip()]
    if bad:
        raise SettingsError(f"{path}: every expected failure needs a reason; missing for {bad}")
    return dict(entries)


def test_id(module: str, name: str) -> str:
    """The id an expected-failures entry uses: the suite module's short name and the test's name."""
    return f"{module.rsplit('.', 1)[-1]}::{name}"
