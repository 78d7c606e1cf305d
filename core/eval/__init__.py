"""Evaluation: question files and retrieval metrics (``metrics.py``), the faithfulness judge
(``judge.py``), and the baselines side by side (``compare.py``)."""
