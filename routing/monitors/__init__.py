"""routing.monitors."""
