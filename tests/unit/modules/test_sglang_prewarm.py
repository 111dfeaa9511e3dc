"""sglang_prewarm in-process (cases in test_sglang_prewarm.yaml; the harness is uthelper.py)."""
from uthelper import cases_of

test_module = cases_of("sglang_prewarm", __file__)
