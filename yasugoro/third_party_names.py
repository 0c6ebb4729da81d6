"""The names django-q2 shows in the admin, which it translates into no Japanese. Listed here
so `makemessages` puts them in our catalogues, which Django reads before an app's own: the
admin index and sidebar then speak the staff user's language throughout. Never imported."""

from django.utils.translation import gettext_lazy as _

NAMES = (
    _("Tasks"),
    _("Task"),
    _("Successful task"),
    _("Successful tasks"),
    _("Failed task"),
    _("Failed tasks"),
    _("Scheduled task"),
    _("Scheduled tasks"),
    _("Queued task"),
    _("Queued tasks"),
)
