"""The way in: the CloudEvents HTTP binding, attribute rules, size limits and the
``POST /events`` route. Parsed events go to the store's writer (``app.store.append``).

``ingest.client`` is the exception: a small HTTP client for producers that imports
nothing of ``app`` (the edge bridge uses it).
"""
