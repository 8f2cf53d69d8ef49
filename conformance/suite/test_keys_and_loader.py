"""The backend's key groups follow Flink's arithmetic (KG-1, KG-2), and the loader gives precedence to the
application's backend object (LD-1, LD-2)."""

from __future__ import annotations

from typing import Any

import pytest

from statecert.conformance.helpers import keyed_backend
from statecert.reference.loader import load_state_backend
from statecert.reference.serializers import LongSerializer, MsgpackSerializer, StringSerializer
from statecert.spec.errors import IllegalStateError
from statecert.spec.keygroups import assign_to_key_group

KEY_SAMPLES = {
    "str": (StringSerializer(), ["", "a", "hello", "Grüße", "日本", "🙂", *(f"key-{i}" for i in range(300))]),
    "long": (LongSerializer(), [0, 1, -1, 2**31, -(2**63), 2**63 - 1, *range(-150, 150)]),
    "msgpack": (MsgpackSerializer(), [["t", i] for i in range(100)] + [{"a": 1}, None, 3.5]),
}


@pytest.mark.requirement("KG-1", "KG-2", "KB-KEY-1")
@pytest.mark.parametrize("max_parallelism", [1, 7, 128, 1000, 32768])
@pytest.mark.parametrize("kind", sorted(KEY_SAMPLES))
def test_current_key_group_is_flinks(state_backend: Any, kind: str, max_parallelism: int) -> None:
    """At Flink's default max parallelism (128), at others a user may set (KG-4: any of 1..32768, where a bit mask
    is no modulo) and at the largest."""
    serializer, keys = KEY_SAMPLES[kind]
    with keyed_backend(state_backend, key_serializer=serializer, max_parallelism=max_parallelism) as backend:
        for key in keys:
            if key is None:
                continue
            expected = assign_to_key_group(serializer.key_hash(key), max_parallelism)
            try:
                backend.set_current_key(key)
            except IllegalStateError as e:
                pytest.fail(
                    f"KG-2: set_current_key({key!r}) at max parallelism {max_parallelism} (key group "
                    f"{expected}, range [0, {max_parallelism - 1}]) raised {e!r}"
                )
            assert backend.current_key_group == expected, (
                f"KG-2: set_current_key({key!r}) at max parallelism {max_parallelism}: expected key group "
                f"{expected}, got {backend.current_key_group}"
            )


@pytest.mark.requirement("LD-1", "LD-2")
def test_application_backend_beats_configuration(state_backend: Any) -> None:
    config = {"state.backend.type": "statecert-no-such-backend"}
    chosen = load_state_backend(state_backend, job_config=config, cluster_config=config)
    assert type(chosen) is type(state_backend) and chosen.name == state_backend.name, (
        f"LD-1, LD-2: load_state_backend(application backend {state_backend.name!r}, configured type "
        f"'statecert-no-such-backend') gave {chosen!r}"
    )


@pytest.mark.requirement("LD-2")
def test_configure_keeps_the_backends_settings(state_backend: Any) -> None:
    """The backend under test came from its factory, configured: configuring it again with other values (as the
    loader does for an application's backend) changes nothing it already decided."""
    from statecert.spec.backend import ConfigurableStateBackend

    if not isinstance(state_backend, ConfigurableStateBackend):
        pytest.skip("the backend takes no configuration (no configure())")
    caps = state_backend.capabilities
    other = {
        "state.backend.incremental": str(not caps.incremental_checkpoints).lower(),  # for backends reading 1.x keys
        "execution.checkpointing.incremental": str(not caps.incremental_checkpoints).lower(),
    }
    again = state_backend.configure(other)
    assert again.capabilities == caps, (
        f"LD-2: configure({other}) changed the capabilities of a configured backend: {caps} -> {again.capabilities}"
    )
    assert again.name == state_backend.name, "LD-2: again.name: expected state_backend.name"
