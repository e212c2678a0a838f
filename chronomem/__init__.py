"""Chronomem: a temporal knowledge graph for AI-agent memory, living in PostgreSQL.

This package is deliberately small: settings, the embedded server, bootstrap,
migrations and the CLI. Every rule about facts lives in SQL (sql/, functions/).
"""
