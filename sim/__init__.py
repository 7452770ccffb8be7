"""The outside world: replays production traffic into the landing zone, day by day."""
