"""The log's writer: group commit (``group_commit.Appender``), planning a group in memory
(``planning``), what the writer knows of the log's tail (``tail_cache``), writing a
planned group with the SQL functions (``writes``), the connections it keeps
(``connections``) and its wake-up hints after commit (``wake_hints``).

Everything that appends events (ingest, the model registry and deployment commands, the
scheduler's decisions) hands them to an ``Appender``; nothing outside ``app.store`` opens
a transaction on the log.
"""
