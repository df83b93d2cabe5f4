"""Index layout: staging table schemas, the manifest, and the summary of a run."""
