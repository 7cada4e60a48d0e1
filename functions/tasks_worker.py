"""AWS Lambda entry for SQS events: task runs at scale (partial batch failure reporting)."""

from aircoach.entry.startup import starting

with starting():  # the imports and the worker, without the cyclic GC (aircoach/entry/startup.py)
    from aircoach.entry.tasks_worker import worker_from_environment

    handler = worker_from_environment().handle
