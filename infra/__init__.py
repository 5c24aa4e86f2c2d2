"""Starting and stopping the real components: JVM jars, the Kafka broker, topics, Spark standalone."""
