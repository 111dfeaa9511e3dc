"""sglang_ready in-process (cases in test_sglang_ready.yaml; the harness is uthelper.py)."""
from uthelper import cases_of

test_module = cases_of("sglang_ready", __file__)
