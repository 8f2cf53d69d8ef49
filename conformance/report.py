"""The certification report: JSON (per requirement, chapter and capability) and a Markdown certificate beside it."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statecert.spec.requirements import Requirement

# How test outcomes fold into one requirement outcome, strongest first.
ORDER = ("failed", "expected-failure", "passed", "unsupported", "skipped")


@dataclass
class TestResult:
    test_id: str
    outcome: str  # passed, failed, expected-failure, unsupported, skipped
    requirements: tuple[str, ...]
    capability: str | None = None
    message: str = ""


@dataclass
class Report:
    header: dict[str, Any]
    requirements: dict[str, Requirement]
    results: list[TestResult] = field(default_factory=list)
    stale_expected_failures: list[str] = field(default_factory=list)
    unknown_requirements: dict[str, list[str]] = field(default_factory=dict)

    def requirement_outcomes(self) -> dict[str, dict[str, Any]]:
        by_requirement: dict[str, list[TestResult]] = defaultdict(list)
        for result in self.results:
            for rid in result.requirements:
                by_requirement[rid].append(result)
        out = {}
        for rid, requirement in self.requirements.items():
            results = by_requirement.get(rid, [])
            outcomes = {r.outcome for r in results}
            outcome = next((o for o in ORDER if o in outcomes), "not-applicable")
            reasons = [r.message for r in results if r.outcome == outcome and r.message]
            if outcome == "not-applicable":
                reasons = [
                    "not a backend obligation (arithmetic, reference implementation or CLI): checked by "
                    "statecert's own test suite"
                ]
            out[rid] = {
                "chapter": requirement.chapter,
                "text": requirement.text,
                "outcome": outcome,
                "tests": sorted(r.test_id for r in results),
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
            if result.capability:
                capabilities[result.capability][result.outcome] += 1
        summary = Counter(info["outcome"] for info in requirements.values())
        failed = (
            summary["failed"] > 0
            or bool(self.stale_expected_failures)
            or bool(self.unknown_requirements)
            or not any(r.outcome == "passed" for r in self.results)  # nothing checked is nothing certified
        )
        return {
            **self.header,
            "verdict": "not certified" if failed else "certified",
            "summary": {"requirements": dict(summary), "tests": dict(Counter(r.outcome for r in self.results))},
            "requirements": requirements,
            "chapters": {c: dict(v) for c, v in sorted(chapters.items())},
            "capabilities": {
                name: {"declared": self.header["backend"]["capabilities"].get(name), "tests": dict(counts)}
                for name, counts in sorted(capabilities.items())
            },
            "stale_expected_failures": self.stale_expected_failures,
            "unknown_requirements": self.unknown_requirements,
        }

    def write(self, path: Path) -> tuple[Path, Path]:
        data = self.to_dict()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
        markdown = path.with_suffix(".md")
        markdown.write_text(certificate(data), encoding="utf-8")
        return path, markdown


def certificate(data: dict[str, Any]) -> str:
    """A certificate a person reads and archives: what was tested, with which options, and the verdict."""
    backend = data["backend"]
    lines = [
        f"# statecert certificate: {backend['name']}",
        "",
        f"**Verdict: {data['verdict'].upper()}**",
        "",
        "| | |",
        "| --- | --- |",
        f"| backend | `{backend['name']}` ({backend['factory']}) |",
        f"| backend version | {backend['version']} |",
        f"| statecert | {data['statecert_version']}, spec {data['spec_version']} |",
        f"| date | {data['date']} |",
        f"| python | {data['python']} |",
        f"| seed | {data['options']['seed']} |",
        f"| options | tiers {', '.join(data['options']['tiers'])}; storage {data['options']['storage']}; "
        f"max examples {data['options']['max_examples']} |",
        "",
        "## Declared capabilities",
        "",
    ]
    lines += [f"- `{name}`: {value}" for name, value in backend["capabilities"].items()]
    lines += [
        "",
        "## Requirements by chapter",
        "",
        "| chapter | " + " | ".join(ORDER) + " | not-applicable |",
        "| --- |" + " --- |" * (len(ORDER) + 1),
    ]
    for chapter, counts in data["chapters"].items():
        lines.append(f"| {chapter} | " + " | ".join(str(counts.get(o, 0)) for o in (*ORDER, "not-applicable")) + " |")
    failed = {rid: info for rid, info in data["requirements"].items() if info["outcome"] == "failed"}
    if failed:
        lines += ["", "## Violated requirements", ""]
        for rid, info in failed.items():
            lines += [
                f"- **{rid}** ({info['chapter']}): {info['text']}",
                f"  - failing: {', '.join(info['tests'])}",
                f"  - {info['reason']}",
            ]
    expected = {rid: info for rid, info in data["requirements"].items() if info["outcome"] == "expected-failure"}
    if expected:
        lines += ["", "## Known bugs (expected failures)", ""]
        lines += [f"- **{rid}**: {info['reason']}" for rid, info in expected.items()]
    unsupported = [rid for rid, info in data["requirements"].items() if info["outcome"] == "unsupported"]
    if unsupported:
        lines += ["", "## Unsupported by design", "", ", ".join(unsupported)]
    if data["stale_expected_failures"]:
        lines += ["", "## Stale expected failures (match no test)", ""]
        lines += [f"- `{entry}`" for entry in data["stale_expected_failures"]]
    lines += ["", "## Every requirement", "", "| requirement | outcome | tests |", "| --- | --- | --- |"]
    for rid, info in data["requirements"].items():
        lines.append(f"| {rid} | {info['outcome']} | {len(info['tests'])} |")
    return "\n".join(lines) + "\n"
