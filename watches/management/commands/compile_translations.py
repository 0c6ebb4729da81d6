"""`manage.py compile_translations`: build the .mo catalogues from the .po files.

Pure Python (polib), so a machine without GNU gettext's msgfmt can still serve Japanese.
The .mo files are build output and not in git.
"""

from __future__ import annotations

from pathlib import Path

import polib
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def compile_catalogues(locale_dirs: list[Path]) -> list[Path]:
    written = []
    for locale_dir in locale_dirs:
        for po_path in sorted(Path(locale_dir).glob("*/LC_MESSAGES/*.po")):
            mo_path = po_path.with_suffix(".mo")
            if mo_path.exists() and mo_path.stat().st_mtime >= po_path.stat().st_mtime:
                continue
            catalogue = polib.pofile(str(po_path))
            catalogue.save_as_mofile(str(mo_path))
            written.append(mo_path)
    return written


class Command(BaseCommand):
    help = "Compile the translation catalogues (.po → .mo) without needing GNU gettext."

    def handle(self, *args, **options) -> None:
        try:
            written = compile_catalogues([Path(p) for p in settings.LOCALE_PATHS])
        except (OSError, ValueError) as exc:
            raise CommandError(f"could not compile the catalogues: {exc}") from None
        for path in written:
            self.stdout.write(f"compiled {path}")
