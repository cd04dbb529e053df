"""Shared test fixtures. The real data lives in ../shared/data beside the checkout (never copied)."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("VTX_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ../shared/data (or $VTX_SHARED_DATA); fails loudly when it is missing."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"shared data not found at {SHARED_DATA}; set VTX_SHARED_DATA")
    return SHARED_DATA
