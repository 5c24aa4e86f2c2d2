"""routing.composite."""
