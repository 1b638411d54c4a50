"""The Spark tests' fixtures (``spark``, ``arm_fault``) are in tests/conftest.py: the reference suite's
sink scenarios share the same Spark session."""
