"""AIR Coach API: a serverless chat-agent backend."""
