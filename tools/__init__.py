"""Tools that make the documentation's images: screenshots of the Dagster and Label Studio UIs."""
