"""Evaluators of one contract (evaluator.py), which `eval` and train's evaluation run: BUCC-format P/R/F1
(bucc.py), Tatoeba and xsim (retrieval.py), and in `words/` the analyses of a model's layers (`eval words`,
`eval tokens`)."""
