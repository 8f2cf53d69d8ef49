"""Declarative failure, recovery, savepoint and format-migration scenarios (not built yet: its own issue)."""
