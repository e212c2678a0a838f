"""Chronomem's thin HTTP API (FastAPI): authenticate, then one SQL call per route.

The ASGI app is `thin_api.app:app`. Every rule -- who may see what, what a fact
supersedes, what holds at an instant -- is decided by the SQL it calls.
"""
