"""The conformance suite that checks any backend against the spec (pytest plugin and `statecert certify`).

Not built yet: it is the subject of its own issue. Until then the project's self-tests live in `tests/`.
"""
