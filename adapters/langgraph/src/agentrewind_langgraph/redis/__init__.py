"""RewindSaver on Redis: the backend (one script per write) and its key layout."""
