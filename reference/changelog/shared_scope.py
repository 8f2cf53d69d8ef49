"""A stream factory that writes every stream into the shared scope: a materialization is referenced by every
checkpoint until the next one, so its files must live as long as a retained checkpoint references them, which the
shared state registry guarantees (CL-2, CKP-2), and not in one checkpoint's exclusive directory."""

from __future__ import annotations

from statecert.spec.storage import CheckpointedStateScope, CheckpointStateOutputStream, CheckpointStreamFactory


class SharedScopeStreamFactory:
    def __init__(self, factory: CheckpointStreamFactory) -> None:
        self._factory = factory

    def create_checkpoint_state_output_stream(self, scope: CheckpointedStateScope) -> CheckpointStateOutputStream:
        return self._factory.create_checkpoint_state_output_stream(CheckpointedStateScope.SHARED)
