"""The event store: the only code that writes the log, and the reads over it."""
