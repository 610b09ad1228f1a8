"""``foldgate run``: from the settings to a serving process and back to its exit code — the wiring,
the enabled platforms, what the screen shows, the web servers, signals, logging and the event loop.
"""
