"""Evaluators of one contract (evaluator.py), which `eval` and train's evaluation run: BUCC-format P/R/F1
(bucc.py), Tatoeba and xsim (retrieval.py); `words/` analyses an encoder's layers (`eval words|tokens`)."""
