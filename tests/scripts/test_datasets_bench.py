"""datasets_bench on a folder with a corrupt JPEG: a clean error naming the file (exit 1, no
uncaught exception), or the file left out of the timing under --on-corrupt skip."""
import json
import os
import subprocess

import pytest

BENCH = os.environ.get("DATASETS_BENCH", "")
pytestmark = pytest.mark.skipif(not BENCH or not os.access(BENCH, os.X_OK),
                                reason="DATASETS_BENCH (the built datasets_bench) not set; ctest "
                                       "sets it")


@pytest.fixture
def folder(tmp_path):
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    for i in range(3):
        px = rng.integers(0, 256, (240, 300, 3), dtype=np.uint8)
        Image.fromarray(px).save(tmp_path / f"good{i}.JPEG", quality=90)
    good = (tmp_path / "good0.JPEG").read_bytes()
    (tmp_path / "truncated.JPEG").write_bytes(good[:400])
    return tmp_path


def bench(folder, *extra):
    return subprocess.run([BENCH, "--dir", str(folder), "--repeats", "1", *extra],
                          capture_output=True, text=True, timeout=120)


def test_corrupt_file_is_reported_and_exits_non_zero(folder):
    p = bench(folder)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "truncated.JPEG" in p.stderr and "--on-corrupt skip" in p.stderr, p.stderr
    assert "terminate" not in p.stderr and p.stdout == ""


def test_corrupt_file_is_skipped_when_asked(folder):
    for transform in ("train", "eval"):
        p = bench(folder, "--on-corrupt", "skip", "--transform", transform)
        assert p.returncode == 0, p.stderr
        assert "skipped: " in p.stderr and "truncated.JPEG" in p.stderr, p.stderr
        doc = json.loads(p.stdout)
        assert doc["images"] == 3 and doc["skipped"] == 1, doc


def test_missing_folder_is_an_error_not_a_crash(tmp_path):
    p = bench(tmp_path / "absent")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "absent" in p.stderr and "terminate" not in p.stderr, p.stderr
