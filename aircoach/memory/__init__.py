"""What the coach remembers of a student beyond the history window (issue 34, item 5): the
rules that read it from the student's messages (`extract`). Storage, the prompt section and
the routes are not built yet."""
