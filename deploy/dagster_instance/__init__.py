"""The Dagster instance's plug-ins that the embedded settings (`deploy/dagster.yaml`) name: an
event log storage and a compute log manager. Dagster loads them; the pipelines never import them.
"""
