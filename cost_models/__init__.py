"""Analytical cost model: pure functions from specs and a parallel configuration to
FLOPs, bytes and seconds. No I/O, no rich or typer here."""
