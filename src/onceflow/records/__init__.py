"""Record batches (magic v2) as the bytes the log stores."""
