import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = os.path.join(REPO, "scripts")
FIXTURES = os.path.join(HERE, "fixtures")
# The official MLPerf v1.1 packages are read in place, never copied into the repo.
SHARED_V11 = os.path.join(REPO, "..", "shared", "data", "mlperf_training_v1.1")

sys.path.insert(0, SCRIPTS)
sys.dont_write_bytecode = True


@pytest.fixture
def official():
    if not os.path.isdir(os.path.join(SHARED_V11, "Graphcore")) or \
            not os.path.isdir(os.path.join(SHARED_V11, "NVIDIA")):
        pytest.skip(f"official MLPerf v1.1 packages not present at {SHARED_V11}")
    return os.path.normpath(SHARED_V11)
