"""The version of headcut (and of headcut-grader, released together); pyproject.toml says the same."""
__version__ = "0.1.0"
