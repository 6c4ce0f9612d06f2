from headcut.cli.main import app

app()
