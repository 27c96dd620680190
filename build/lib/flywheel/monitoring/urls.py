from django.urls import path

from flywheel.monitoring import views

app_name = "monitoring"

urlpatterns = [
    path("", views.index, name="index"),
    path("alerts/<uuid:alert_id>/rollback/", views.alert_rollback, name="alert_rollback"),
    path("<slug:agent_name>/", views.agent_monitor, name="agent_monitor"),
    path("<slug:agent_name>/rules/", views.rule_list, name="rule_list"),
    path("<slug:agent_name>/rules/new/", views.rule_new, name="rule_new"),
    path("<slug:agent_name>/rules/<int:rule_id>/edit/", views.rule_edit, name="rule_edit"),
    path("<slug:agent_name>/rules/<int:rule_id>/delete/", views.rule_delete, name="rule_delete"),
]
