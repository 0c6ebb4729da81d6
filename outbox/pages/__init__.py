"""Delivery's own pages for the person: the service worker, the test push, the history."""
