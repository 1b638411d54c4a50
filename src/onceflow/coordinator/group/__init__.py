"""The classic consumer-group protocol: membership, rebalances and committed offsets."""
