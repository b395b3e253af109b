"""RewindSaver on SQLite: the backend, its reads and writes (one transaction each), its SQL."""
