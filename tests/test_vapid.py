"""VAPID keys: the command, where the key comes from, and that the private half never shows."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from django.views.debug import SafeExceptionReporterFilter

from outbox import vapid
from tests.factories import device_with_cookie

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def key_file(settings, tmp_path) -> Path:
    """No key in the environment; the file (absent for now) under a temporary var/."""
    settings.VAPID_PRIVATE_KEY = ""
    settings.VAPID_PRIVATE_KEY_FILE = tmp_path / "var" / "vapid_private_key.pem"
    return settings.VAPID_PRIVATE_KEY_FILE


def run(*args) -> str:
    out = StringIO()
    call_command("vapid_keys", *args, stdout=out)
    return out.getvalue()


def test_the_command_creates_a_private_pem_readable_only_by_its_owner(key_file):
    output = run()
    assert "created" in output
    assert key_file.stat().st_mode & 0o777 == 0o600
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    assert vapid.public_key_b64(key) in output
    assert vapid.private_key_b64(key) not in output


def test_without_ensure_an_existing_key_is_never_replaced(key_file):
    run()
    before = key_file.read_bytes()
    with pytest.raises(CommandError, match="orphan every push subscription"):
        run()
    assert key_file.read_bytes() == before


def test_ensure_is_idempotent(key_file):
    first = run("--ensure")
    second = run("--ensure")
    assert "created" in first and "kept" in second
    assert first.splitlines()[-1] == second.splitlines()[-1]  # same applicationServerKey


def test_ensure_as_a_function(key_file):
    assert vapid.ensure_key_file() is True
    assert vapid.ensure_key_file() is False


def test_print_gives_a_line_for_the_environment_that_round_trips(key_file, settings):
    run("--ensure")
    public = vapid.public_key_b64()
    line = run("--print").strip()
    assert line.startswith("VAPID_PRIVATE_KEY=")
    settings.VAPID_PRIVATE_KEY = line.split("=", 1)[1]
    settings.VAPID_PRIVATE_KEY_FILE = key_file.parent / "elsewhere.pem"
    assert vapid.public_key_b64() == public


def test_print_without_a_key_says_how_to_make_one(key_file):
    with pytest.raises(CommandError, match="vapid_keys --ensure"):
        run("--print")


def test_the_environment_key_wins_over_the_file(key_file, settings):
    run("--ensure")
    from_file = vapid.public_key_b64()
    settings.VAPID_PRIVATE_KEY = vapid.private_key_b64(vapid.generate_private_key())
    assert vapid.public_key_b64() != from_file


def test_the_application_server_key_is_the_uncompressed_point():
    raw = base64.urlsafe_b64decode(vapid.public_key_b64() + "==")
    assert len(raw) == 65
    assert raw[0] == 0x04


@pytest.mark.parametrize("bad", ["not-a-key", "AAAA", "A" * 43 + "B" * 10])
def test_a_bad_environment_key_is_reported_without_echoing_it(settings, bad):
    settings.VAPID_PRIVATE_KEY = bad
    with pytest.raises(vapid.VapidKeyMissing) as caught:
        vapid.private_key()
    assert bad not in str(caught.value)
    assert "VAPID_PRIVATE_KEY" in str(caught.value)


def ignored_by_the_checkouts_rules(path: str, scratch: Path) -> bool:
    """Whether git ignores `path` (relative to the checkout) under the checkout's .gitignore,
    asked in a scratch repository: an export without .git (a `git archive`, a release
    tarball) is checked too, and a developer's global excludes cannot hide a missing line."""
    shutil.copyfile(ROOT / ".gitignore", scratch / ".gitignore")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(scratch)], env=env, check=True)
    asked = ["git", "check-ignore", "-q", path]
    return subprocess.run(asked, cwd=scratch, env=env, check=False).returncode == 0


def test_the_default_key_file_is_git_ignored(tmp_path):
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    if ROOT not in Path(django_settings.VAR_DIR).resolve().parents:
        pytest.skip("YASUGORO_VAR_DIR points outside the checkout")
    default = Path(django_settings.VAR_DIR).resolve() / "vapid_private_key.pem"
    relative = str(default.relative_to(ROOT))
    assert ignored_by_the_checkouts_rules(relative, tmp_path), f"{default} is not git-ignored"


def test_the_ignore_check_tells_a_file_the_rules_do_not_name(tmp_path):
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    assert not ignored_by_the_checkouts_rules("outbox/vapid.py", tmp_path)


# --- Settings -------------------------------------------------------------------------------


def import_settings(**env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("VAPID_SUBJECT", "DEBUG")}
    environ.update(env, SECRET_KEY="x" * 50)
    return subprocess.run(
        [sys.executable, "-c", "import yasugoro.settings"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )


def test_vapid_subject_is_required_outside_debug():
    result = import_settings(DEBUG="0")
    assert result.returncode != 0
    assert "VAPID_SUBJECT" in result.stderr


def test_vapid_subject_has_a_default_in_debug():
    assert import_settings(DEBUG="1").returncode == 0


@pytest.mark.parametrize(
    ("subject", "ok"),
    [
        ("mailto:ops@example.com", True),
        ("https://yasugoro.example/contact", True),
        ("ops@example.com", False),
        ("http://yasugoro.example/", False),
        ("mailto:", False),
    ],
)
def test_vapid_subject_must_be_mailto_or_https(subject, ok):
    result = import_settings(DEBUG="0", VAPID_SUBJECT=subject)
    assert (result.returncode == 0) is ok, result.stderr[-300:]


# --- The private key never shows ------------------------------------------------------------


@pytest.mark.django_db
def test_the_private_key_is_in_no_page(client, admin_client, settings):
    secret = settings.VAPID_PRIVATE_KEY
    device, _ = device_with_cookie(client)
    pages = [
        client.get("/settings/"),
        client.get("/sw.js"),
        client.post("/settings/transfer"),
        admin_client.get(f"/admin/watches/device/{device.pk}/change/"),
        admin_client.get("/admin/watches/device/"),
    ]
    for page in pages:
        assert page.status_code == 200
        assert secret not in page.content.decode()
    assert vapid.public_key_b64() in pages[0].content.decode()


def test_the_private_key_is_hidden_from_the_debug_error_page(settings):
    cleansed = SafeExceptionReporterFilter().get_safe_settings()
    assert cleansed["VAPID_PRIVATE_KEY"] != settings.VAPID_PRIVATE_KEY
