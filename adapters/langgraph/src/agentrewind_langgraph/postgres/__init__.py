"""RewindSaver on PostgreSQL: the backend, its reads and its SQL."""
