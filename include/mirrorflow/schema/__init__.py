"""Schemas travel with the records: the schema registry transfer (docs/schemas.md)."""
