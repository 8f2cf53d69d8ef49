"""The keyed timer service of the reference backends (chapter TM)."""
