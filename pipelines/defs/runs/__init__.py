"""Sensors that look after the runs themselves rather than the data."""
