"""The heap (`hashmap`) state backend: state as serialized bytes in per-key-group dicts, copy-on-write snapshots."""
