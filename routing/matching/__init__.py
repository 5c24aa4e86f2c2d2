"""routing.matching."""
