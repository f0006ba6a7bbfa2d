"""The edge bridge for event-based vision sensors (issue: "The sensor bridge"). Not built
yet: this package only holds the place the layout fixes; it will speak HTTP through
``ingest.client`` only."""
