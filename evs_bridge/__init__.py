"""The edge bridge for event-based vision sensors: decode recordings and live MQTT streams
(``decoders``), remove hot pixels and background noise (``filters``), find, track and
classify activity per time window (``windows``, ``regions``, ``classify``), and post
compact lineage events through ``ingest.client`` (``lineage``, ``output``, ``spool``).
It imports nothing of ``app`` or ``scheduler``: it runs at the edge and speaks HTTP.
``docs/evs-bridge.md`` describes the pipeline, the event shapes and the formats.
"""
