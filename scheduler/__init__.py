"""The projection-driven task scheduler and dead-letter queue.

Routes (``routes``) turn events into tasks through the dispatcher projection
(``projections``); workers lease, extend, complete and fail them (``queue``, placed by
``placement``); failures retry with backoff and end in the dead-letter queue by class
(``tasks``); ``autoscale`` advises worker counts and ``service`` runs what depends on the
clock. Every decision is a ``causeway.task.*`` event with its causes. ``router`` is its
HTTP face, mounted by ``app.main``; ``docs/scheduler.md`` describes it all.
"""
