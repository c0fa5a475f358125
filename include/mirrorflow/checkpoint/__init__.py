"""Checkpoints and consumer-group offset sync, as MM2's MirrorCheckpointConnector, and the
client-side translation (RemoteClusterUtils)."""
