"""Sensors and step retries that look after the runs themselves rather than the data."""
