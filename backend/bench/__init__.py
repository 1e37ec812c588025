"""The load test: the streams it drives, the load test itself, the sweep over settings."""
