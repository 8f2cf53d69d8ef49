"""The `statecert` command line."""
