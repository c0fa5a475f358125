"""Heartbeats, as MM2's MirrorHeartbeatConnector: emitted on the source, sensed on the target."""
