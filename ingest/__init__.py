"""The write path: the CloudEvents HTTP binding, validation, limits and the appender.

``ingest.client`` is the exception: a small HTTP client for producers that imports
nothing of ``app`` (the edge bridge uses it).
"""
