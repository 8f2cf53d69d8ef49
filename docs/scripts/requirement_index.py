"""The requirement index: every requirement ID of the spec's chapters with an anchor, its text, its chapter, and the
tests that cite it (suite test functions by name, the repository's own test files by path)."""

from __future__ import annotations

from importlib import resources

from statecert.spec.requirements import load_requirements
from tests.test_traceability import cited, citing_tests


def chapter_titles() -> dict[str, str]:
    """Chapter file name -> its title (the first heading)."""
    chapters = resources.files("statecert.spec").joinpath("chapters")
    titles = {}
    for entry in chapters.iterdir():
        if entry.name.endswith(".md") and entry.name != "README.md":
            first = next((line for line in entry.read_text(encoding="utf-8").splitlines() if line.startswith("# ")), "")
            titles[entry.name] = first.removeprefix("# ").strip() or entry.name
    return titles


def requirement_index() -> str:
    requirements = load_requirements()
    titles = chapter_titles()
    suite, files = citing_tests(), cited()
    lines = [
        "# Requirement index",
        "",
        f"All {len(requirements)} requirements of the spec's chapters (`spec/chapters/`), generated from the chapters "
        "and from the `@pytest.mark.requirement(...)` marks of the tests when the documentation is built. A link "
        "`requirements.md#KS-1` reaches a requirement; the certificate names requirements by these IDs.",
        "",
    ]
    chapter = None
    for requirement in requirements.values():
        if requirement.chapter != chapter:
            chapter = requirement.chapter
            lines += [f"## {titles.get(chapter, chapter)}", "", f"`spec/chapters/{chapter}`", ""]
        tests = ", ".join(f"`{name}`" for name in sorted(suite.get(requirement.id, ())))
        test_files = ", ".join(f"`{path}`" for path in sorted(files.get(requirement.id, ())))
        lines.append(f'<a id="{requirement.id}"></a>**{requirement.id}** {requirement.text}')
        lines.append("")
        lines.append(f"Cited by suite tests {tests or '(none)'}; test files {test_files or '(none)'}.")
        lines.append("")
    return "\n".join(lines)
