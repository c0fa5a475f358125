"""Kafka plumbing: clients from MM2 settings, compacted internal topics as stores, MM2's
record formats, watermarks, dumps of internal topics."""
