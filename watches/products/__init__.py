"""Products (one JAN code) and their offers across shops: intake, polling, the re-fetch,
product watches and their triggers."""
