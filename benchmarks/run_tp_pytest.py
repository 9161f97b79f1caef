"""pytest for one torchrun rank (tests/test_tp_gpu.py): a temporary directory of its own per rank
(two pytests must not share --basetemp), faulthandler on, the exit code passed back to torchrun.

    torchrun --standalone --nproc-per-node 2 benchmarks/run_tp_pytest.py -m gpu tests/test_tp_gpu.py -v
"""
import os
import sys

import pytest

rank = os.environ.get("RANK", "0")
sys.exit(pytest.main(sys.argv[1:] + [f"--basetemp=/tmp/qgemm_tp_pytest_{rank}", "-p", "no:cacheprovider",
                                     "-o", "faulthandler_timeout=60"]))
