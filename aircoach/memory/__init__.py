"""What the coach remembers of a student beyond the history window (issue 34, item 5): the
rules that read it (`extract`), its records and store port (`ports`), the ranking and the
prompt section (`recall`), and the service a turn and `/api/memory` use (`service`)."""
