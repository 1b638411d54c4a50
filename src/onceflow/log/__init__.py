"""Partition logs on disk: segments, indexes, producer state, compaction, the file writer (no asyncio here)."""
