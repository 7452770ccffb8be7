"""Deployment: Dagster instance settings, the production-shaped stack (`deploy.stack`) and a local
Label Studio server (`deploy.label_studio`)."""
