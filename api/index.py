from aircoach.app import create_app

app = create_app()
