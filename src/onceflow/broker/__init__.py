"""The broker process: asyncio server, request handlers, partition registry."""
