"""Full screens pushed over the main view."""
