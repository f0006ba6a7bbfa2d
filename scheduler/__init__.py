"""The projection-driven task scheduler and dead-letter queue.

Routes (``routes``) turn events into tasks through the dispatcher projection
(``projections``, which makes them with ``creation``); workers lease, extend, complete and
fail them (``queue``, placed by ``placement``); ``decisions`` says, without I/O, what each
command decides, and ``tasks`` folds the decisions into a task's state; failures retry
with backoff and end in the dead-letter queue by class. ``rows`` holds the scheduler's
tables and is its only SQL; reads of the log go through ``app.store.decision_reads``.
``autoscale`` advises worker counts and ``service`` runs what depends on the clock. Every
decision is a ``causeway.task.*`` event with its causes. ``router`` is its HTTP face (the
routers of ``web``), mounted by ``app.main``; ``docs/scheduler.md`` describes it all.
"""
