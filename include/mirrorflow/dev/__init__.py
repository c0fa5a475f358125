"""Development helpers, not on the runtime path: local Kafka brokers, MirrorMaker 2, a
Spark Connect server and a Spark standalone cluster, the demo."""
