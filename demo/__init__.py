"""The demo world: a built-in marketplace whose catalogue lives in this app's own table, a
realistic catalogue with 90 days of history, and a market that keeps moving.

Production code imports nothing from here (an import-linter contract in pyproject.toml): the
app is in INSTALLED_APPS only when DEMO_MARKET is on, and settings name its adapter by import
string."""
