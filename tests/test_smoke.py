import json

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_seed_demo_is_idempotent():
    from demo.seed import seed_demo

    first = seed_demo()
    second = seed_demo()
    assert first["listings"] > 0
    assert set(second.values()) == {0}


@pytest.mark.django_db
def test_migrate_creates_the_dispatch_schedule_once():
    from django_q.models import Schedule

    call_command("migrate", verbosity=0)
    assert Schedule.objects.filter(name="outbox-dispatch").count() == 1


def test_check_deploy_with_production_settings_is_clean(tmp_path):
    """`manage.py check --deploy` in a fresh process, DEBUG off, secrets from the environment
    as production has them: no warning at all (the security middleware, cookies, HSTS)."""
    import os
    import secrets
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "DEBUG", "DATABASE_URL", "DEMO_MARKET"}
    }
    env.update(
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="yasugoro.example",
        VAPID_PRIVATE_KEY="not-used-by-check",
        VAPID_SUBJECT="mailto:ops@yasugoro.example",
        SITE_URL="https://yasugoro.example",
        YASUGORO_VAR_DIR=str(tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "no issues" in done.stdout


# A request through the production settings (DEBUG off) as a browser on https sends it: the
# language switch, which every page's footer posts to. Prints each cookie's flags.
_LANGUAGE_SWITCH = """
import json
import django
django.setup()
from django.test import Client
client = Client()
response = client.post(
    "/language", {"language": "en", "next": "/"}, secure=True, HTTP_HOST="localhost"
)
print(json.dumps({
    "status": response.status_code,
    "cookies": {
        name: {"secure": bool(morsel["secure"]), "samesite": morsel["samesite"]}
        for name, morsel in response.cookies.items()
    },
}))
"""


def test_the_language_cookie_is_secure_in_production_like_every_other_cookie(tmp_path):
    """The session, CSRF and device cookies are Secure when DEBUG is off; so is the language
    cookie the footer's switch sets."""
    from tests.demo.test_demo_app import environment
    from tests.demo.test_demo_app import run as run_python

    result = run_python(environment(tmp_path), "-c", _LANGUAGE_SWITCH)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["status"] == 302
    assert answer["cookies"]["django_language"] == {"secure": True, "samesite": "Lax"}
