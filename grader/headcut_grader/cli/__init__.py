"""The runtime's commands (grade, serve); the toolkit's `headcut` command registers the same functions."""
