"""berth's schema revisions, written by hand to match ``tables.py`` (a test compares the two).

Alembic loads every module here as a revision; shared helpers live in ``migrations.ddl``.
"""
