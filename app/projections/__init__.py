"""Read models derived from the log, each applied in position order with a checkpoint."""
