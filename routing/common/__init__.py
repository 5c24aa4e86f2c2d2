"""routing.common."""
