"""One reader's rule for every page's query string: text a view can hand to the database, or a
clear 4xx before any view runs (docs/decisions/0060-query-string-refused-before-views.md).

Django decodes `request.GET` leniently: a NUL stays (PostgreSQL refuses it in a text
parameter, SQLite's full-text query ends at it), and bytes that are not UTF-8 (a lone
surrogate, `%ED%A0%80`) become U+FFFD. Views then take the last of repeated values
(`QueryDict.get`) and bound what they keep of each; this refuses what no view should see.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import parse_qsl

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils.translation import gettext as _

# Longer than any link the pages make (a search is at most 100 characters, 900 bytes
# encoded); gunicorn refuses a request line past 4,094 bytes anyway.
MAX_QUERY_BYTES = 4096


def problem(raw: bytes) -> tuple[int, str] | None:
    """What is wrong with the raw (still percent-encoded) query string, as the status and a
    message for the person, or None when every name and value is text a view may use."""
    if len(raw) > MAX_QUERY_BYTES:
        return 414, _(
            "This address is too long: its part after “?” has more than %(limit)s characters. "
            "Search again with fewer words."
        ) % {"limit": f"{MAX_QUERY_BYTES:,}"}
    try:
        pairs = parse_qsl(raw.decode(), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        return 400, _(
            "This address contains characters that are not valid text (it is not UTF-8). "
            "Check the link, or search again from the search box."
        )
    if any("\x00" in name or "\x00" in value for name, value in pairs):
        return 400, _(
            "This address contains a null character, which no search or filter uses. "
            "Check the link, or search again from the search box."
        )
    return None


class QueryStringMiddleware:
    """Answers a request whose query string `problem()` refuses with its status and message, in
    the request's language (after LocaleMiddleware): a page for a browser, JSON for a `.json`
    URL or a client that does not take HTML."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # WSGI hands the query string over as latin-1 text; these are its original bytes.
        found = problem(request.META.get("QUERY_STRING", "").encode("iso-8859-1"))
        if found is None:
            return self.get_response(request)
        status, message = found
        if request.path.endswith(".json") or not request.accepts("text/html"):
            return JsonResponse({"ok": False, "error": message}, status=status)
        html = render_to_string("bad_request.html", {"message": message}, request=request)
        return HttpResponse(html, status=status)
