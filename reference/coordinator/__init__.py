"""The checkpoint coordinator: triggering, acknowledgements, completion, failure counting, retention, recovery."""
