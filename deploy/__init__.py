"""Deployment: Dagster instance settings and the production-shaped stack (`deploy.stack`)."""
