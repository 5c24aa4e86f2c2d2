"""Everything that writes input to Kafka: workload generators, fault injection, the Kafka writer."""
