"""The MM2 configuration: the properties reader, the model of clusters and flows with its
property specs, replication policies, secret providers."""
