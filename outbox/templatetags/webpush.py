"""`{% vapid_public_key %}`: the applicationServerKey for pages that subscribe to push, so
page views in `watches` need not import delivery's key handling."""

from django import template

from outbox.vapid import public_key_or_empty

register = template.Library()


@register.simple_tag
def vapid_public_key() -> str:
    return public_key_or_empty()
