"""What an operator sees of the service: traces (OpenTelemetry), metrics (Prometheus),
clock drift and structured logs. ``docs/observability.md`` lists every span, attribute,
metric and log field.

It sits beside ``app.settings`` and ``app.errors`` at the bottom of the layers and imports
nothing of ours, so the store, the projections, the scheduler and the web faces may all
report through it. The edge bridge speaks to OpenTelemetry's API directly (it imports
nothing of ``app``).
"""
