"""The checkpoint format: the `_metadata` codec (every version ever written stays readable) and the canonical
key-groups stream any backend can restore."""
