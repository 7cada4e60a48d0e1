"""Structured tasks: validated JSON outputs from a model, with a fallback policy, a review
queue and a version stored with every output. The first task is the e-mail triage."""
