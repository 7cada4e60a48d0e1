"""The coach's prompt docs: sources (local folder, S3), the versioned prompt store, and the
`docs` commands that publish them."""
