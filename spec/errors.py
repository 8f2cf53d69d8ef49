"""The documented exception types of the contract (spec chapter ERR).

Every error a backend, storage, loader or reader raises on bad input or misuse is one of these, so that callers
and the conformance suite can assert on the type and users get one message naming the file and the problem.
"""

from __future__ import annotations


class StateCertError(Exception):
    """Base of every documented statecert error (ERR-1)."""


class CheckpointFormatError(StateCertError):
    """`_metadata` or a state file is truncated, corrupt, foreign or otherwise unreadable (FMT-8)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class CheckpointCorruptedError(CheckpointFormatError):
    """A state file's size or checksum differs from what `_metadata` recorded, or a native file fails its own
    checksum: the bytes changed after they were written (FMT-12). Never restored as a smaller state."""


class UnknownFormatVersionError(CheckpointFormatError):
    """The file has our magic number but a format version this reader does not know (FMT-3)."""


class IncompleteCheckpointError(StateCertError):
    """A checkpoint pointer names a directory that holds no complete `_metadata` (FMT-5)."""


class UnsafePathError(CheckpointFormatError):
    """A state handle would make restore read or write outside the checkpoint or savepoint directory (FMT-10)."""


class StateMigrationError(StateCertError):
    """Restored state cannot be used with the new serializers or TTL settings (SER-6, SER-7, TTL-5)."""


class UnsupportedSnapshotError(StateCertError):
    """A backend was handed state handles of a format it cannot restore, e.g. another backend's native savepoint
    (KB-RESTORE-5)."""


class StateSizeLimitError(StateCertError):
    """State exceeds a documented size limit, e.g. job-manager storage's maximum state size (CS-JM-2)."""


class InvalidStateValueError(ValueError, StateCertError):
    """A value the state kind forbids, e.g. None added to a list state (KS-LIST-3)."""


class SnapshotCancelledError(StateCertError):
    """The asynchronous part of a snapshot was cancelled, e.g. because the backend was closed (KB-SNAP-6)."""


class BackendClosedError(StateCertError):
    """State was accessed on a backend after `close()` (KB-LIFE-2)."""


class UnknownStateBackendError(StateCertError):
    """A configured backend or storage name is neither built in nor registered as an entry point (LD-4)."""


class DynamicCodeLoadingError(StateCertError):
    """A `module:attr` factory path or entry point cannot be imported, or does not name a factory (LD-5)."""


class IllegalConfigurationError(StateCertError):
    """A configuration value is missing, malformed or out of range; the message names the key (LD-6)."""


class CheckpointNotFoundError(StateCertError, FileNotFoundError):
    """A checkpoint pointer names nothing that exists (FMT-5)."""


class IllegalStateError(RuntimeError, StateCertError):
    """An operation out of order, e.g. removing the same map entry twice through an iterator (KS-MAP-5)."""


class UnsupportedFeatureError(StateCertError):
    """A backend was asked for something it declares unsupported in its capabilities (SB-3)."""


class ScenarioError(StateCertError):
    """An invalid scenario file: the message names the file, the key and what was expected (SCN-1)."""
