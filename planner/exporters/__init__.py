"""Exporters (plans -> launchable configurations) and importers (existing launches -> plans)."""
