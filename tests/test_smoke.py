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
