"""sglang_lock in-process (cases in test_sglang_lock.yaml; the harness is uthelper.py)."""
from uthelper import cases_of

test_module = cases_of("sglang_lock", __file__)
