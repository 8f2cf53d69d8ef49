"""The conformance suite that checks any backend or checkpoint storage against the spec: the suite (`suite/`), the
pytest plugin that runs it against a named backend and writes the report, and the typed helpers a backend author
plugs into (`statecert certify`, or `pytest --pyargs statecert.conformance.suite --statecert-backend NAME`).
"""
