"""The course knowledge on board: the manual's sections and the embedded `kb_search`."""
