"""routing.stats."""
