"""Entry points inside the package: the CLI (`python -m aircoach ...`), the uvicorn server it
starts, and the SQS task worker (`functions/tasks_worker.py`). They sit above the HTTP layer
and the features, and set up the process (logging, settings); nothing imports them back."""
