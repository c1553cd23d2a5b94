"""Runnable examples: bring your own graph to the approval worker."""
