"""End-user pages (server-rendered)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from watches.models import Listing


def home(request: HttpRequest) -> HttpResponse:
    listings = Listing.objects.filter(paused=False).order_by("name")[:50]
    return render(request, "watches/home.html", {"listings": listings})
