"""Partition logs on disk: segments, indexes, durability."""
