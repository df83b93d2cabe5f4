"""Looking at an index's graph: pictures of a part of it (PNG, pannable HTML) and the statistics a user checks
before trusting it (counts, degrees, types, components, quarantine and extraction failures)."""
