"""Layer 1, where data enters: the specs (model, cluster, job as frozen values), the strict readers of
every input file (model presets and YAML, Hugging Face ``config.json``, graph models, job files), the
validation rules every number passes, the errors and their exit codes, and the atomic file writer.
Imports nothing of ours."""
