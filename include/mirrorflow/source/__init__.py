"""Source replication, as MM2's MirrorSourceConnector: planning ranges, writing them
exactly once, the offset store, offset syncs, topic metadata sync, the mirror's history."""
