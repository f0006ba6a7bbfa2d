"""The REST face of the service: problem rendering, auth, reads, replay and health."""
