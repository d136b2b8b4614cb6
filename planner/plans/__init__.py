"""Layer 5, the plan: a planning problem (:mod:`.problem`: inputs resolved, profiles applied,
estimate and search on it), and the versioned plan files of chain models (:mod:`.plan_file`) and
graph models (:mod:`.graph_plan`) that the search writes and everything after it reads."""
