"""Database access: engines built from settings, and the table definitions."""
