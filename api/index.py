from aircoach.entry.startup import starting

with starting():  # the imports and the app, without the cyclic GC (aircoach/entry/startup.py)
    from aircoach.app import create_app

    app = create_app()
