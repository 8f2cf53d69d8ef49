"""Declarative failure, recovery, savepoint and format-migration scenarios (TOML, `README.md`), their loader, the
library in `library/`, golden savepoints in `golden/`, and two runners: the simulator and PySpark (`spark/`)."""
