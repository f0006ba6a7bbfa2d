"""The projection-driven task scheduler and dead-letter handling (issue: "The scheduler and
the dead-letter queue"). Not built yet: this package only holds the place the layout fixes."""
