from headcut.cli.main import app

if __name__ == "__main__":  # not when a spawned worker process imports it
    app()
