"""routing.reliability."""
