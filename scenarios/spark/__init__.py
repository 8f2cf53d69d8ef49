"""The PySpark runner: scenarios in epochs of Spark jobs, the oracle as DataFrame aggregations, and a reader that
loads a savepoint's keyed state into a DataFrame."""
