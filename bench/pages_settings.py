"""Settings of the pages benchmark's server: production settings, plus a URLconf that adds a
minimal view beside the real pages (bench only; never in yasugoro.urls)."""

from yasugoro.settings import *  # noqa: F403

ROOT_URLCONF = "bench.pages_urls"
