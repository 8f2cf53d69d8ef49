"""The certification report: JSON (per requirement, chapter and capability) and a Markdown certificate beside it."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statecert.spec.requirements import CONTRACT, HARDENED, Requirement

# How test outcomes fold into one requirement outcome, strongest first. "not-run": a test the run's options
# selected did not run (pytest's -k, -m or --deselect, or a stop), so the requirement was not fully checked.
ORDER = ("failed", "expected-failure", "not-run", "passed", "unsupported", "skipped")

NOT_AN_OBLIGATION = (
    "not a backend obligation (arithmetic, reference implementation or CLI): checked by statecert's own test suite"
)
CHAPTER_NOT_AN_OBLIGATION = {
    "RDB": "a rule of statecert's reference RocksDB backend, checked by statecert's own tests (tests/test_rocksdb*.py);"
    " a backend with native snapshot files is held to RDB-2 to RDB-4 through the KB-SNAP and SP tests",
    "COORD": "a rule of the checkpoint coordinator, checked by statecert's own tests; no backend implements it",
    "SIM": "a rule of the barrier simulator, checked by statecert's own tests; no backend implements it",
}
"""Why a chapter no suite test checks is not applicable, where the general reason says too little."""
QUICK_PASS = "no failure (quick profile, not a certificate)"
"""The verdict of a quick run in which nothing failed."""
DEFAULTS = "the backend's defaults"
"""What the certificate says was configured when the run handed the backend no configuration."""


# The suite's modules from the most basic contract to the most composite: a failure in an earlier module usually
# explains failures in later ones, so the first failing test in this order is reported as the likely root cause.
BASIS = (
    "test_keys_and_loader",
    "test_keyed_state",
    "test_keyed_state_properties",
    "test_user_function_failures",
    "test_keyed_backend",
    "test_snapshot_lifecycle",
    "test_ttl",  # after the snapshots: its snapshot tests fail on a snapshot bug too, not the other way round
    "test_timers",
    "test_default_serializer",
    "test_serializer_compatibility",
    "test_operator_state",
    "test_damaged_operator_streams",
    "test_storage_contract",
    "test_storage_locations",
    "test_rescale",
    "test_savepoints",
    "test_incremental",
    "test_changelog",
    "test_capabilities",
    "test_model",
    "test_ttl_model",
    "test_scenarios",
)


@dataclass
class TestResult:
    """One test's outcome. `violated` holds the requirements a failure is attributed to (see the plugin)."""

    test_id: str
    outcome: str  # passed, failed, expected-failure, unsupported, skipped
    requirements: tuple[str, ...]
    capabilities: tuple[str, ...] = ()
    message: str = ""
    violated: tuple[str, ...] = ()
    order: int = 0
    seconds: float = 0.0
    """How long the test took (setup, call and teardown)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.test_id,
            "outcome": self.outcome,
            "requirements": list(self.requirements),
            "violated": list(self.violated),
            "capabilities": list(self.capabilities),
            "message": self.message,
            "seconds": round(self.seconds, 3),
        }

    def outcome_for(self, requirement: str) -> str:
        """The outcome this test gives one of its requirements: a failure attributed elsewhere did not reach it."""
        if self.outcome == "failed" and requirement not in self.violated:
            return "skipped"
        return self.outcome


def shortened(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis where longer (terminal lines, table cells)."""
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"


def _cell(text: str, limit: int = 300) -> str:
    """Text for one Markdown table cell: one line, pipes escaped, long reasons cut."""
    return shortened(text, limit).replace("|", "\\|")


def undeclared(capabilities: dict[str, Any]) -> list[str]:
    """The capabilities a certified configuration does not declare, and so were not certified."""
    return [name for name, value in capabilities.items() if not value]


def _reason(result: TestResult, requirement: str) -> str:
    """Why a test gives a requirement its outcome: its message, or for a failure attributed to other requirements
    the note that the test stopped before it finished checking this one."""
    if result.outcome == "failed" and requirement not in result.violated:
        return f"not fully checked: {result.test_id} failed on {', '.join(result.violated)}: {result.message}"
    return result.message


def root_cause(results: list[TestResult]) -> TestResult | None:
    """The most basic failing test (BASIS order, then collection order), or None when nothing failed."""
    failed = [r for r in results if r.outcome == "failed"]
    if not failed:
        return None
    module_rank = {name: i for i, name in enumerate(BASIS)}
    return min(failed, key=lambda r: (module_rank.get(r.test_id.split("::")[0], len(BASIS)), r.order))


@dataclass
class Report:
    header: dict[str, Any]
    requirements: dict[str, Requirement]
    results: list[TestResult] = field(default_factory=list)
    stale_expected_failures: list[str] = field(default_factory=list)
    unknown_requirements: dict[str, list[str]] = field(default_factory=dict)
    not_run: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Selected tests that reported no outcome, with their requirements."""
    excluded: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Requirement -> (outcome, reason) when the run's options (tiers, subject) left all its tests out."""
    incomplete: dict[str, Any] | None = None
    """When selected tests did not run: their ids, how many were selected, and why (pytest's options)."""

    def requirement_outcomes(self) -> dict[str, dict[str, Any]]:
        by_requirement: dict[str, list[TestResult]] = defaultdict(list)
        for result in self.results:
            for rid in result.requirements:
                by_requirement[rid].append(result)
        missing: dict[str, list[str]] = defaultdict(list)
        for tid, rids in self.not_run.items():
            for rid in rids:
                missing[rid].append(tid)
        out = {}
        for rid, requirement in self.requirements.items():
            results = by_requirement.get(rid, [])
            outcomes = {r.outcome_for(rid) for r in results} | ({"not-run"} if missing[rid] else set())
            outcome = next((o for o in ORDER if o in outcomes), "not-applicable")
            deciding = [r for r in results if r.outcome_for(rid) == outcome]
            reasons = [_reason(r, rid) for r in deciding if r.message]
            if outcome == "not-run":
                reasons = [f"{len(missing[rid])} of its {len(results) + len(missing[rid])} selected tests did not run"]
            elif not results and rid in self.excluded:
                outcome, reason = self.excluded[rid]
                reasons = [reason]
            elif outcome == "not-applicable" and not reasons:
                reasons = [CHAPTER_NOT_AN_OBLIGATION.get(rid.split("-")[0], NOT_AN_OBLIGATION)]
            out[rid] = {
                "chapter": requirement.chapter,
                "level": requirement.level,
                "title": requirement.title,
                "text": requirement.text,
                "outcome": outcome,
                "tests": sorted([*(r.test_id for r in results), *missing[rid]]),
                "failing_tests": [{"id": r.test_id, "message": r.message} for r in deciding if outcome == "failed"],
                "reason": reasons[0] if reasons else "",
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        requirements = self.requirement_outcomes()
        chapters: dict[str, Counter[str]] = defaultdict(Counter)
        for rid, info in requirements.items():
            chapters[rid.split("-")[0]][info["outcome"]] += 1
        capabilities: dict[str, Counter[str]] = defaultdict(Counter)
        for result in self.results:
            for capability in result.capabilities:
                capabilities[capability][result.outcome] += 1
        summary = Counter(info["outcome"] for info in requirements.values())
        tests = Counter(r.outcome for r in self.results) + Counter({"not-run": len(self.not_run)})
        unsound = (
            bool(self.stale_expected_failures)
            or bool(self.unknown_requirements)
            or not any(r.outcome == "passed" for r in self.results)  # nothing checked is nothing certified
            or self.incomplete is not None  # a part of the suite certifies nothing
        )
        failed = summary["failed"] > 0 or unsound
        # a quick run leaves the heavy tests and the model tier out: no failure there is not a certificate
        passing = QUICK_PASS if self.header.get("options", {}).get("quick") else "certified"
        levels = {}
        for level in (CONTRACT, HARDENED):  # the hardened level holds the contract and the hardening
            counted = [
                rid
                for rid, info in requirements.items()
                if info["outcome"] == "failed" and (level == HARDENED or self.requirements[rid].level == CONTRACT)
            ]
            levels[level] = {"verdict": "not certified" if counted or unsound else passing, "failed": counted}
        cause = root_cause(self.results)
        return {
            **self.header,
            "verdict": "not certified" if failed else passing,
            "levels": levels,
            "likely_root_cause": None
            if cause is None
            else {"test": cause.test_id, "requirements": list(cause.violated), "message": cause.message},
            "incomplete": self.incomplete,
            "summary": {
                "requirements": dict(summary),
                "tests": dict(tests),
            },
            "requirements": requirements,
            "chapters": {c: dict(v) for c, v in sorted(chapters.items())},
            "capabilities": {
                name: {"declared": self.header["backend"]["capabilities"].get(name), "tests": dict(counts)}
                for name, counts in sorted(capabilities.items())
            },
            "stale_expected_failures": self.stale_expected_failures,
            "unknown_requirements": self.unknown_requirements,
            "tests": [r.to_dict() for r in sorted(self.results, key=lambda r: r.order)],
        }

    def write(self, path: Path) -> tuple[Path, Path]:
        data = self.to_dict()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
        markdown = path.with_suffix(".md")
        markdown.write_text(certificate(data), encoding="utf-8")
        return path, markdown


def _seconds(bound: Any) -> str:
    """A time bound of the options: seconds, or none (0, or a report written before the option existed)."""
    return f"{bound} s" if bound else "none"


def _pairs(settings: dict[str, Any] | None) -> str:
    """`key=value` settings of a run for the certificate (the changelog switch among them): none is `-`."""
    return ", ".join(f"`{key}={value}`" for key, value in sorted((settings or {}).items())) or "-"


def _file(path: str | None) -> str:
    return f"`{path}`" if path else "-"


def _versions(libraries: dict[str, str] | None) -> str:
    """The libraries' versions a seed reproduces with, as `name version` pairs."""
    return ", ".join(f"{name} {v}" for name, v in libraries.items()) if libraries else "-"


def level_line(levels: dict[str, Any]) -> str:
    """Each level's verdict on one line: the Flink-equivalent contract, and the contract with the hardening."""
    parts = []
    for level, title in ((CONTRACT, "contract (Flink-equivalent)"), (HARDENED, "hardened (contract and hardening)")):
        info = levels[level]
        failed = f": {', '.join(info['failed'])} violated" if info["failed"] else ""
        parts.append(f"{title} {info['verdict'].upper()}{failed}")
    return "Levels: " + "; ".join(parts)


def certificate(data: dict[str, Any]) -> str:
    """A certificate a person reads and archives: what was tested, with which options, and the verdict."""
    backend = data["backend"]
    storage = data.get("storage_under_test")
    subject = backend["name"] or (storage["requested"] if storage else "?")
    storage_line = f"`{storage['requested']}` ({storage['factory']}, {storage['version']})" if storage else "-"
    configured = data["options"].get("backend_config")
    lines = [
        f"# statecert certificate: {subject}",
        "",
        f"**Verdict: {data['verdict'].upper()}**",
        "",
    ]
    if data.get("levels"):
        lines += [level_line(data["levels"]), ""]
    failed = {rid: info for rid, info in data["requirements"].items() if info["outcome"] == "failed"}
    if data.get("likely_root_cause"):
        cause = data["likely_root_cause"]
        lines += ["## Likely root cause", "", f"`{cause['test']}`: {cause['message']}", ""]
    if failed:
        consequences = " (most likely consequences of the root cause)" if data.get("likely_root_cause") else ""
        lines += [f"## Violated requirements{consequences}", ""]
        for rid, info in failed.items():
            lines.append(f"- **{rid}** {info.get('title', '')} ({info['chapter']})")
            lines += [f"  - `{t['id']}`: {_cell(t['message'], 500)}" for t in info["failing_tests"]]
        lines.append("")
    lines += [
        "| | |",
        "| --- | --- |",
        f"| contracts certified | {', '.join(data.get('contracts', []))} |",
        f"| backend | `{backend['name']}` ({backend['factory']}) |",
        f"| backend version | {backend['version']} |",
        f"| checkpoint storage | {storage_line} |",
        f"| statecert | {data['statecert_version']}, spec {data['spec_version']} |",
        f"| date | {data['date']} |",
        f"| python | {data['python']} on {data.get('platform', '-')} |",
        f"| libraries | {_versions(data.get('libraries'))} |",
        f"| seed | {data['options']['seed']} |",
        f"| options | tiers {', '.join(data['options']['tiers'])}; storage {data['options']['storage']}; "
        f"max examples {data['options']['max_examples']}; "
        f"test timeout {_seconds(data['options'].get('test_timeout'))} |",
        f"| configuration | {_pairs(configured) if configured else DEFAULTS} |",
        f"| capability overrides | {_pairs(data['options'].get('capability_overrides'))} |",
        f"| expected failures | {_file(data['options'].get('expected_failures'))} |",
        "",
        "## Declared capabilities",
        "",
    ]
    lines += [f"- `{name}`: {value}" for name, value in backend["capabilities"].items()]
    off = undeclared(backend["capabilities"])
    if off:
        lines += ["", f"Not declared, so not certified in this configuration: {', '.join(off)}."]
    lines += [
        "",
        "## Requirements by chapter",
        "",
        "| chapter | " + " | ".join(ORDER) + " | not-applicable |",
        "| --- |" + " --- |" * (len(ORDER) + 1),
    ]
    for chapter, counts in data["chapters"].items():
        lines.append(f"| {chapter} | " + " | ".join(str(counts.get(o, 0)) for o in (*ORDER, "not-applicable")) + " |")
    if data.get("incomplete"):
        incomplete = data["incomplete"]
        lines += [
            "",
            "## Incomplete run",
            "",
            f"{len(incomplete['tests_not_run'])} of the {incomplete['selected']} tests this run's options select did "
            f"not run ({incomplete['cause']}): a part of the suite certifies nothing.",
        ]
    expected = {rid: info for rid, info in data["requirements"].items() if info["outcome"] == "expected-failure"}
    if expected:
        lines += ["", "## Known bugs (expected failures)", ""]
        lines += [f"- **{rid}**: {info['reason']}" for rid, info in expected.items()]
    unsupported = {rid: info for rid, info in data["requirements"].items() if info["outcome"] == "unsupported"}
    if unsupported:
        lines += ["", "## Unsupported by design", ""]
        lines += [f"- **{rid}** {info.get('title', '')}: {info['reason']}" for rid, info in unsupported.items()]
    if data["stale_expected_failures"]:
        lines += ["", "## Stale expected failures (match no test)", ""]
        lines += [f"- `{entry}`" for entry in data["stale_expected_failures"]]
    lines += [
        "",
        "## Every requirement",
        "",
        "| requirement | title | outcome | tests | why (when not passed) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for rid, info in data["requirements"].items():
        why = "" if info["outcome"] == "passed" else _cell(info.get("reason", ""))
        lines.append(f"| {rid} | {_cell(info.get('title', ''))} | {info['outcome']} | {len(info['tests'])} | {why} |")
    return "\n".join(lines) + "\n"
