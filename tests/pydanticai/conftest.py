"""Fixtures for the pydantic-ai adapter tests: durable store URLs and crash-test subprocesses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("agentrewind_pydantic_ai")

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from pai_flows import Side  # noqa: E402


@pytest.fixture
def durable_url(shared_url: str) -> str:
    """A store URL other processes can open: SQLite file, Redis or PostgreSQL, fresh namespace."""
    return shared_url


@pytest.fixture
def side(tmp_path: Path) -> Side:
    return Side(tmp_path / "side.txt")
