"""Search: the query a person types, the index (FTS5 trigram on SQLite, pg_trgm on
PostgreSQL), the text it indexes and the everyday words of each category."""
