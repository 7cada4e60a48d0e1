"""`python -m aircoach`: the CLI (`aircoach.entry.cli`)."""

from aircoach.entry.cli import main

if __name__ == "__main__":
    main()
