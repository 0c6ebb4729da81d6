"""`manage.py vapid_keys [--ensure] [--print]`: the VAPID key pair push requests are signed with.

- no option: create the key file (VAPID_PRIVATE_KEY_FILE); refuse if it exists, since a new
  key pair orphans every browser subscription made with the old one;
- `--ensure`: create it only when missing (idempotent: `make run` calls it every time);
- `--print`: print the current private key as a `VAPID_PRIVATE_KEY=…` line for the
  environment of a production host (with `--ensure`, after creating it when missing).
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from outbox import vapid


class Command(BaseCommand):
    help = "Create the VAPID key pair (git-ignored file), or print it for VAPID_PRIVATE_KEY."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--ensure", action="store_true", help="create the key file only when it is missing"
        )
        parser.add_argument(
            "--print",
            action="store_true",
            dest="print_key",
            help="print the private key (base64url raw) for the VAPID_PRIVATE_KEY variable",
        )

    def handle(self, *args, ensure: bool, print_key: bool, **options) -> None:
        path = settings.VAPID_PRIVATE_KEY_FILE
        if settings.VAPID_PRIVATE_KEY:
            source = "VAPID_PRIVATE_KEY"
            if not (ensure or print_key):
                raise CommandError("VAPID_PRIVATE_KEY is set: the key comes from the environment")
        elif ensure:
            created = vapid.ensure_key_file(path)
            source = f"{path} ({'created' if created else 'kept'})"
        elif not print_key:
            if not vapid.ensure_key_file(path):
                raise CommandError(
                    f"{path} exists; a new key pair would orphan every push subscription. "
                    "Use --ensure to keep it, or move it away first."
                )
            source = f"{path} (created)"
        else:
            source = str(path)
        try:
            public = vapid.public_key_b64()
        except vapid.VapidKeyMissing as exc:
            raise CommandError(str(exc)) from None
        if print_key:
            self.stdout.write(f"VAPID_PRIVATE_KEY={vapid.private_key_b64()}")
        else:
            self.stdout.write(f"VAPID key: {source}")
            self.stdout.write(f"applicationServerKey: {public}")
