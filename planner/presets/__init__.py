"""Built-in model presets (YAML files under ``models/``), read with importlib.resources."""
