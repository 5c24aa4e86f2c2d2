"""routing.planning."""
