"""The SparkSession the runner and the tests share: local[2] with task retries by default, the UI off, and the
workers started with this interpreter and this `sys.path`, so they import the same statecert (and test helpers)."""

from __future__ import annotations

import os
import sys
from typing import Any

# In local mode Spark ignores spark.task.maxFailures; local[N,F] is N threads with F attempts per task.
DEFAULT_MASTER = "local[2,4]"


def spark_session(master: str = DEFAULT_MASTER, app_name: str = "statecert") -> Any:
    """Get or create the process's SparkSession (one per process: Spark allows no second active context)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([*paths, *os.environ.get("PYTHONPATH", "").split(os.pathsep)])
    )
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("FATAL")  # injected task failures would log stack traces
    return session
