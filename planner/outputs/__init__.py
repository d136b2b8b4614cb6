"""Layer 8, where results leave: JSON views of every result (:mod:`.views`, :mod:`.graph_views`),
bubble-fill budgets (:mod:`.bubbles`), Chrome traces (:mod:`.trace`), timeline SVG
(:mod:`.timeline_svg`), the HTML report (:mod:`.report`), time and cost to train
(:mod:`.costing`) and sweeps over clusters (:mod:`.sweep`)."""
