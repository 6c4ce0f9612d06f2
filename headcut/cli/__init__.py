"""Command-line interface (typer). Library code never imports this package."""
