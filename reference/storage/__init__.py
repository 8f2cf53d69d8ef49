"""Checkpoint storages: job-manager (inline state, bounded size) and file system (any fsspec URL)."""
