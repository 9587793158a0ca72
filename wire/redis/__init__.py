"""The wire on Redis."""
