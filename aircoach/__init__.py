"""AIR Coach API: a serverless chat-agent backend."""

__version__ = "0.1.0"
