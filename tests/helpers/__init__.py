"""Helpers shared by the test tiers (tests/unit, tests/console, tests/e2e): no test module imports
another test module; fixtures that several modules use are registered in tests/conftest.py."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
