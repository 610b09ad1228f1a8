"""The web pages foldgate serves for people: a browser chat with the bot, and an
operator's view of every chat's context, compactions and cost.

Server-rendered HTML (Jinja2, escaped by default) with a little of foldgate's own JavaScript for
live updates; charts are SVG drawn by :mod:`gateway.web.charts`. Nothing is fetched from elsewhere.
"""
