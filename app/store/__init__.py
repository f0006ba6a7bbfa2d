"""The event store: the only code that writes the log, and the reads over it.

Its database functions are kept one per ``.sql`` file in ``sql/`` (the walk, the
append-only trigger) and ``append/sql/`` (the two appends); migrations install them.
"""
