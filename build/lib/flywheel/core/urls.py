from django.urls import path

from flywheel.core import views

app_name = "core"

urlpatterns = [
    path("agents/", views.agent_list, name="agent_list"),
    path("agents/<slug:name>/", views.agent_detail, name="agent_detail"),
    path("audit/", views.audit_list, name="audit_list"),
    path("account/tokens/", views.token_list, name="token_list"),
    path("account/tokens/<uuid:token_id>/revoke/", views.token_revoke, name="token_revoke"),
    path("api/v1/me", views.api_me, name="api_me"),
]
