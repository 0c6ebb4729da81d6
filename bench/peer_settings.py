"""Settings of the peer bench (bench/bench_peer.py): the production settings plus
django-post-office, its tables in the bench's own database, its defaults but the backend —
Django's locmem mail backend for both sides (our e-mail channel and post-office), so each
builds every mail as MIME and neither waits on a network. Bench only."""

from yasugoro.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "post_office"]  # noqa: F405
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
POST_OFFICE = {"BACKENDS": {"default": "django.core.mail.backends.locmem.EmailBackend"}}
# post-office logs each batch at INFO; at the bench's WARNING, like the outbox's console channel.
LOGGING = {
    **LOGGING,  # noqa: F405
    "loggers": {
        **LOGGING["loggers"],  # noqa: F405
        "post_office": {"handlers": ["console"], "level": "WARNING"},
    },
}
