"""Every configuration key statecert reads, declared once with Flink 2.x's name, type, default and deprecated 1.x
fallbacks (Flink's `StateBackendOptions`, `CheckpointingOptions`, `StateRecoveryOptions`, `RestartStrategyOptions`,
`StateChangelogOptions`, `RocksDBOptions`, `RocksDBConfigurableOptions`). `statecert config --list` prints this
table; components read their settings only through it."""

from __future__ import annotations

from typing import Any

from statecert.reference.config.option import ConfigOption
from statecert.reference.config.values import (
    enum_parser,
    float_parser,
    int_parser,
    memory_parser,
    parse_bool,
    parse_duration_ms,
    parse_memory_size,
    parse_string,
)

MAX_INLINE_THRESHOLD = 1024 * 1024
JAVA_INT_MAX = 2**31 - 1


def _string(
    key: str, component: str, description: str, *deprecated: str, default_text: str = "none"
) -> ConfigOption[str | None]:
    return ConfigOption(key, parse_string, None, description, component, "string", deprecated, default_text)


# -- state backend and checkpoint storage (LD) ---------------------------------------------------------------------
STATE_BACKEND = ConfigOption[str](
    "state.backend.type",
    parse_string,
    "hashmap",
    "The state backend: 'hashmap', 'rocksdb' (any case), an entry point name or a 'module:attr' factory.",
    "loader",
    "string",
    ("state.backend",),
)
CHECKPOINT_STORAGE = _string(
    "execution.checkpointing.storage",
    "loader",
    "The checkpoint storage: 'jobmanager', 'filesystem' (any case), an entry point or 'module:attr'. Unset: "
    "'filesystem' when a checkpoint directory is set, else 'jobmanager'.",
    "state.checkpoint-storage",
)
CHECKPOINTS_DIRECTORY = _string(
    "execution.checkpointing.dir",
    "storage",
    "Where checkpoints go (any fsspec URL); required by 'filesystem' storage, optional for 'jobmanager' (metadata).",
    "state.checkpoints.dir",
    "state.backend.fs.checkpointdir",
)
SAVEPOINT_DIRECTORY = _string(
    "execution.checkpointing.savepoint-dir",
    "storage",
    "The default directory for savepoints.",
    "state.savepoints.dir",
    "savepoints.state.backend.fs.dir",
)
DATA_INLINE_THRESHOLD = ConfigOption[int](
    "execution.checkpointing.data-inline-threshold",
    memory_parser(MAX_INLINE_THRESHOLD),
    20 * 1024,
    "State smaller than this is stored inline in _metadata instead of in files (at most 1 MiB).",
    "storage",
    "memory size",
    ("state.storage.fs.memory-threshold", "state.backend.fs.memory-threshold"),
    "20kb",
)
INCREMENTAL_CHECKPOINTS = ConfigOption[bool](
    "execution.checkpointing.incremental",
    parse_bool,
    False,
    "Upload only what changed since the last completed checkpoint, where the backend can.",
    "rocksdb",
    "boolean",
    ("state.backend.incremental",),
)
MAX_RETAINED_CHECKPOINTS = ConfigOption[int](
    "execution.checkpointing.num-retained",
    int_parser(1),
    1,
    "Completed checkpoints kept; older ones are subsumed and discarded.",
    "checkpointing",
    "integer",
    ("state.checkpoints.num-retained",),
)

# -- checkpointing (COORD) -------------------------------------------------------------------------------------------
CHECKPOINTING_INTERVAL = ConfigOption[int | None](
    "execution.checkpointing.interval",
    parse_duration_ms,
    None,
    "The interval of periodic checkpoints. Unset: checkpointing is off (no periodic checkpoints).",
    "checkpointing",
    "duration",
    default_text="none (off)",
)
CHECKPOINTING_MODE = ConfigOption[str](
    "execution.checkpointing.mode",
    enum_parser(("EXACTLY_ONCE", "AT_LEAST_ONCE")),
    "EXACTLY_ONCE",
    "EXACTLY_ONCE (barriers aligned, or unaligned with unaligned.enabled) or AT_LEAST_ONCE.",
    "checkpointing",
    "enum",
)
CHECKPOINTING_TIMEOUT = ConfigOption[int](
    "execution.checkpointing.timeout",
    parse_duration_ms,
    600_000,
    "A checkpoint not complete after this long expires.",
    "checkpointing",
    "duration",
    default_text="10 min",
)
MAX_CONCURRENT_CHECKPOINTS = ConfigOption[int](
    "execution.checkpointing.max-concurrent-checkpoints",
    int_parser(1),
    1,
    "Checkpoints in flight at once.",
    "checkpointing",
    "integer",
)
MIN_PAUSE = ConfigOption[int](
    "execution.checkpointing.min-pause",
    parse_duration_ms,
    0,
    "The least time between the end of one checkpoint and the start of the next.",
    "checkpointing",
    "duration",
    default_text="0 ms",
)
TOLERABLE_FAILED_CHECKPOINTS = ConfigOption[int](
    "execution.checkpointing.tolerable-failed-checkpoints",
    int_parser(0),
    0,
    "Consecutive checkpoint failures tolerated before the job fails over (Flink's counting, COORD-6).",
    "checkpointing",
    "integer",
)
UNALIGNED_ENABLED = ConfigOption[bool](
    "execution.checkpointing.unaligned.enabled",
    parse_bool,
    False,
    "Unaligned checkpoints (EXACTLY_ONCE mode, max one concurrent checkpoint).",
    "checkpointing",
    "boolean",
    ("execution.checkpointing.unaligned",),
)
ALIGNED_CHECKPOINT_TIMEOUT = ConfigOption[int](
    "execution.checkpointing.aligned-checkpoint-timeout",
    parse_duration_ms,
    0,
    "With unaligned checkpoints: 0 starts every checkpoint unaligned; a positive value starts aligned and switches "
    "to unaligned after it.",
    "checkpointing",
    "duration",
    ("execution.checkpointing.alignment-timeout",),
    "0 s",
)
EXTERNALIZED_CHECKPOINT_RETENTION = ConfigOption[str](
    "execution.checkpointing.externalized-checkpoint-retention",
    enum_parser(("NO_EXTERNALIZED_CHECKPOINTS", "DELETE_ON_CANCELLATION", "RETAIN_ON_CANCELLATION")),
    "NO_EXTERNALIZED_CHECKPOINTS",
    "What happens to retained checkpoints when the job ends: NO_EXTERNALIZED_CHECKPOINTS deletes them whenever it "
    "ends, DELETE_ON_CANCELLATION keeps them only when it fails, RETAIN_ON_CANCELLATION also when it is cancelled. "
    "A job that finishes (or stops with a savepoint) deletes them in every mode.",
    "checkpointing",
    "enum",
)

# -- recovery --------------------------------------------------------------------------------------------------------
STATE_RECOVERY_PATH = _string(
    "execution.state-recovery.path",
    "recovery",
    "A savepoint or retained checkpoint the job starts from.",
    "execution.savepoint.path",
)
STATE_RECOVERY_CLAIM_MODE = ConfigOption[str](
    "execution.state-recovery.claim-mode",
    enum_parser(("CLAIM", "NO_CLAIM")),
    "NO_CLAIM",
    "CLAIM: the job owns the snapshot it starts from and deletes it when it is subsumed; NO_CLAIM: the job never "
    "deletes it, and its first checkpoint is a full one that references none of its files.",
    "recovery",
    "enum",
    ("execution.savepoint-restore-mode",),
)

# -- restart strategies ----------------------------------------------------------------------------------------------
RESTART_STRATEGY = ConfigOption[str | None](
    "restart-strategy.type",
    enum_parser(
        ("disable", "fixed-delay", "failure-rate", "exponential-delay"),
        {
            "none": "disable",
            "off": "disable",
            "fixeddelay": "fixed-delay",
            "failurerate": "failure-rate",
            "exponentialdelay": "exponential-delay",
        },
    ),
    None,
    "disable (none, off), fixed-delay, failure-rate or exponential-delay. Unset: exponential-delay when "
    "checkpointing is on, else disable.",
    "restart",
    "enum",
    ("restart-strategy",),
    "none (see text)",
)
FIXED_DELAY_ATTEMPTS = ConfigOption[int](
    "restart-strategy.fixed-delay.attempts", int_parser(0), 1, "Restarts before the job fails.", "restart", "integer"
)
FIXED_DELAY_DELAY = ConfigOption[int](
    "restart-strategy.fixed-delay.delay",
    parse_duration_ms,
    1000,
    "Delay between restarts.",
    "restart",
    "duration",
    default_text="1 s",
)
FAILURE_RATE_MAX_FAILURES = ConfigOption[int](
    "restart-strategy.failure-rate.max-failures-per-interval",
    int_parser(1),
    1,
    "Restarts within one interval before the job fails.",
    "restart",
    "integer",
)
FAILURE_RATE_INTERVAL = ConfigOption[int](
    "restart-strategy.failure-rate.failure-rate-interval",
    parse_duration_ms,
    60_000,
    "The interval failures are counted in.",
    "restart",
    "duration",
    default_text="1 min",
)
FAILURE_RATE_DELAY = ConfigOption[int](
    "restart-strategy.failure-rate.delay",
    parse_duration_ms,
    1000,
    "Delay between restarts.",
    "restart",
    "duration",
    default_text="1 s",
)
EXPONENTIAL_INITIAL_BACKOFF = ConfigOption[int](
    "restart-strategy.exponential-delay.initial-backoff",
    parse_duration_ms,
    1000,
    "The first delay.",
    "restart",
    "duration",
    default_text="1 s",
)
EXPONENTIAL_MAX_BACKOFF = ConfigOption[int](
    "restart-strategy.exponential-delay.max-backoff",
    parse_duration_ms,
    60_000,
    "The largest delay.",
    "restart",
    "duration",
    default_text="1 min",
)
EXPONENTIAL_MULTIPLIER = ConfigOption[float](
    "restart-strategy.exponential-delay.backoff-multiplier",
    float_parser(1.0),
    1.5,
    "The delay is multiplied by this after each failure.",
    "restart",
    "double",
)
EXPONENTIAL_RESET_THRESHOLD = ConfigOption[int](
    "restart-strategy.exponential-delay.reset-backoff-threshold",
    parse_duration_ms,
    3_600_000,
    "After this long without a failure the delay and the attempt count start over.",
    "restart",
    "duration",
    default_text="1 h",
)
EXPONENTIAL_JITTER = ConfigOption[float](
    "restart-strategy.exponential-delay.jitter-factor",
    float_parser(0.0, 1.0),
    0.1,
    "Each delay varies by up to this share (drawn from the run's seed).",
    "restart",
    "double",
)
EXPONENTIAL_ATTEMPTS = ConfigOption[int](
    "restart-strategy.exponential-delay.attempts-before-reset-backoff",
    int_parser(1),
    JAVA_INT_MAX,
    "Restarts before the job fails, counted since the last reset.",
    "restart",
    "integer",
    default_text="infinite",
)

# -- changelog (CL) --------------------------------------------------------------------------------------------------
CHANGELOG_ENABLED = ConfigOption[bool](
    "state.changelog.enabled",
    parse_bool,
    False,
    "Wrap the state backend in the changelog state backend (CL-1).",
    "changelog",
    "boolean",
    ("state.backend.changelog.enabled",),
)
CHANGELOG_STORAGE = ConfigOption[str](
    "state.changelog.storage",
    enum_parser(("filesystem", "memory")),
    "filesystem",
    "filesystem: log segments are files in the checkpoint's shared scope; memory: inline in _metadata. (Flink's "
    "default 'memory' keeps the log in JobManager memory, for tests; statecert's default is durable.)",
    "changelog",
    "enum",
    ("state.backend.changelog.storage",),
)
CHANGELOG_MATERIALIZE_INTERVAL = ConfigOption[int](
    "state.changelog.periodic-materialize.interval",
    parse_duration_ms,
    600_000,
    "How often the wrapped backend is materialized.",
    "changelog",
    "duration",
    ("state.backend.changelog.periodic-materialize.interval",),
    "10 min",
)
CHANGELOG_MAX_FAILURES = ConfigOption[int](
    "state.changelog.max-failures-allowed",
    int_parser(1),
    3,
    "Failed materializations tolerated before the job fails.",
    "changelog",
    "integer",
    ("state.backend.changelog.max-failures-allowed",),
)
CHANGELOG_DSTL_BASE_PATH = _string(
    "state.changelog.dstl.dfs.base-path",
    "changelog",
    "Refused (IllegalConfigurationError): the log lives in the checkpoint directory, so that a restore reads "
    "nothing outside it (FMT-10).",
    "dstl.dfs.base-path",
)

# -- RocksDB (RDB) ---------------------------------------------------------------------------------------------------
ROCKSDB_LOCAL_DIR = _string(
    "state.backend.rocksdb.localdir",
    "rocksdb",
    "Where RocksDB instances keep their working directories.",
    default_text="the system temporary directory",
)
ROCKSDB_PREDEFINED_OPTIONS = ConfigOption[str](
    "state.backend.rocksdb.predefined-options",
    enum_parser(("DEFAULT", "SPINNING_DISK_OPTIMIZED", "SPINNING_DISK_OPTIMIZED_HIGH_MEM", "FLASH_SSD_OPTIMIZED")),
    "DEFAULT",
    "Flink's predefined option profiles, option for option.",
    "rocksdb",
    "enum",
)
ROCKSDB_OPTIONS_FACTORY = _string(
    "state.backend.rocksdb.options-factory",
    "rocksdb",
    "'module:attr' of an options factory (create_db_options, create_column_options, optional "
    "create_table_options and configure); applied after the predefined options.",
)
ROCKSDB_MEMORY_MANAGED = ConfigOption[bool](
    "state.backend.rocksdb.memory.managed",
    parse_bool,
    True,
    "One shared block cache and write buffer manager per slot, sized from the slot's managed memory.",
    "rocksdb",
    "boolean",
)
ROCKSDB_MEMORY_FIXED_PER_SLOT = ConfigOption[int | None](
    "state.backend.rocksdb.memory.fixed-per-slot",
    parse_memory_size,
    None,
    "The slot's memory instead of managed memory.",
    "rocksdb",
    "memory size",
    default_text="none",
)
ROCKSDB_MEMORY_FIXED_PER_TM = ConfigOption[int | None](
    "state.backend.rocksdb.memory.fixed-per-tm",
    parse_memory_size,
    None,
    "One cache for the whole process, when neither managed nor fixed-per-slot memory applies.",
    "rocksdb",
    "memory size",
    default_text="none",
)
ROCKSDB_WRITE_BUFFER_RATIO = ConfigOption[float](
    "state.backend.rocksdb.memory.write-buffer-ratio",
    float_parser(),
    0.5,
    "Share of the memory for write buffers.",
    "rocksdb",
    "double",
)
ROCKSDB_HIGH_PRIO_POOL_RATIO = ConfigOption[float](
    "state.backend.rocksdb.memory.high-prio-pool-ratio",
    float_parser(),
    0.1,
    "Share of the cache for index and filter blocks (validated; rocksdict's cache takes a capacity only).",
    "rocksdb",
    "double",
)
ROCKSDB_TIMER_SERVICE_FACTORY = ConfigOption[str](
    "state.backend.rocksdb.timer-service.factory",
    enum_parser(("ROCKSDB", "HEAP")),
    "ROCKSDB",
    "Where timers live: in RocksDB, or on the heap, written in each snapshot's synchronous part (RDB-12).",
    "rocksdb",
    "enum",
)

BUFFER_TIMEOUT = ConfigOption[int](
    "execution.buffer-timeout.interval",
    parse_duration_ms,
    100,
    "How long a partly filled network buffer waits before it is sent (the simulator's buffer timeout, SIM-14).",
    "network",
    "duration",
    ("execution.buffer-timeout",),
    "100 ms",
)
BUFFER_TIMEOUT_ENABLED = ConfigOption[bool](
    "execution.buffer-timeout.enabled",
    parse_bool,
    True,
    "False: a network buffer is sent only when full (or flushed before an event), never on a timeout.",
    "network",
    "boolean",
)

MINI_BATCH_ENABLED = ConfigOption[bool](
    "table.exec.mini-batch.enabled",
    parse_bool,
    False,
    "True: keyed tasks bundle records and access each key's state once per bundle (the simulator, SIM-15); needs "
    "a positive allow-latency and size, as in Flink.",
    "mini-batch",
    "boolean",
)
MINI_BATCH_ALLOW_LATENCY = ConfigOption[int](
    "table.exec.mini-batch.allow-latency",
    parse_duration_ms,
    0,
    "How long a record may wait in a bundle before the bundle is applied.",
    "mini-batch",
    "duration",
    (),
    "0 ms",
)
MINI_BATCH_SIZE = ConfigOption[int](
    "table.exec.mini-batch.size",
    int_parser(bits=64),
    -1,
    "The most records a bundle holds; a full bundle is applied at once.",
    "mini-batch",
    "long",
)

OPTIONS: tuple[ConfigOption[Any], ...] = (
    STATE_BACKEND,
    CHECKPOINT_STORAGE,
    CHECKPOINTS_DIRECTORY,
    SAVEPOINT_DIRECTORY,
    DATA_INLINE_THRESHOLD,
    INCREMENTAL_CHECKPOINTS,
    MAX_RETAINED_CHECKPOINTS,
    CHECKPOINTING_INTERVAL,
    CHECKPOINTING_MODE,
    CHECKPOINTING_TIMEOUT,
    MAX_CONCURRENT_CHECKPOINTS,
    MIN_PAUSE,
    TOLERABLE_FAILED_CHECKPOINTS,
    UNALIGNED_ENABLED,
    ALIGNED_CHECKPOINT_TIMEOUT,
    EXTERNALIZED_CHECKPOINT_RETENTION,
    STATE_RECOVERY_PATH,
    STATE_RECOVERY_CLAIM_MODE,
    RESTART_STRATEGY,
    FIXED_DELAY_ATTEMPTS,
    FIXED_DELAY_DELAY,
    FAILURE_RATE_MAX_FAILURES,
    FAILURE_RATE_INTERVAL,
    FAILURE_RATE_DELAY,
    EXPONENTIAL_INITIAL_BACKOFF,
    EXPONENTIAL_MAX_BACKOFF,
    EXPONENTIAL_MULTIPLIER,
    EXPONENTIAL_RESET_THRESHOLD,
    EXPONENTIAL_JITTER,
    EXPONENTIAL_ATTEMPTS,
    CHANGELOG_ENABLED,
    CHANGELOG_STORAGE,
    CHANGELOG_MATERIALIZE_INTERVAL,
    CHANGELOG_MAX_FAILURES,
    CHANGELOG_DSTL_BASE_PATH,
    ROCKSDB_LOCAL_DIR,
    ROCKSDB_PREDEFINED_OPTIONS,
    ROCKSDB_OPTIONS_FACTORY,
    ROCKSDB_MEMORY_MANAGED,
    ROCKSDB_MEMORY_FIXED_PER_SLOT,
    ROCKSDB_MEMORY_FIXED_PER_TM,
    ROCKSDB_WRITE_BUFFER_RATIO,
    ROCKSDB_HIGH_PRIO_POOL_RATIO,
    ROCKSDB_TIMER_SERVICE_FACTORY,
    BUFFER_TIMEOUT,
    BUFFER_TIMEOUT_ENABLED,
    MINI_BATCH_ENABLED,
    MINI_BATCH_ALLOW_LATENCY,
    MINI_BATCH_SIZE,
)

KEY_PREFIXES = ("state.backend.rocksdb.metrics.",)
"""Families of keys declared by prefix (one boolean per RocksDB native metric, RDB-11)."""

UNSUPPORTED = {
    "execution.checkpointing.write-buffer-size": "fsspec buffers writes itself",
    "execution.checkpointing.create-subdir": "checkpoints always go to <dir>/<job id>",
    "execution.checkpointing.cleaner.parallel-mode": "discards run in the coordinator's thread",
    "execution.checkpointing.local-backup.enabled": "no local recovery",
    "execution.checkpointing.local-backup.dirs": "no local recovery",
    "execution.state-recovery.from-local": "no local recovery",
    "execution.checkpointing.file-merging.enabled": "no file merging (FLIP-306)",
    "execution.checkpointing.unaligned.forced": "no iterative jobs",
    "execution.checkpointing.interval-during-backlog": "sources report no backlog",
    "execution.checkpointing.checkpoints-after-tasks-finish": "always on",
    "execution.state-recovery.ignore-unclaimed-state": "every operator of a snapshot must be restored",
    "state.backend.async": "snapshots are always asynchronous (deprecated in Flink too)",
}
"""Flink keys statecert knows but does not implement, with the reason (the README and `config --list` say so)."""
