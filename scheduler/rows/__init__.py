"""The scheduler's own tables, and the only scheduler code that speaks SQL.

``tasks`` is the task table (``TaskBook`` and the queue's commands write it), ``routes``
the routing table and the dispatcher's pre-warm windows, ``autoscale`` each queue's
controller state and the latencies it reads; ``errors`` tells a database that is away
from a bug. Every function takes the caller's connection and runs in its transaction.
"""
