"""The pure core: algorithms over numpy and scipy, no Spark, no Kafka (a test enforces it)."""
