from headcut_grader.cli.main import app

app()
