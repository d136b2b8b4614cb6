"""The search: enumerate shapes (:mod:`.space`), partition stages (:mod:`.partition`), score and rank
chain models (:mod:`.chain`) and graph models (:mod:`.graph`)."""
