"""The changelog state backend: Flink's generalized incremental checkpoints over any keyed backend (chapter CL)."""
