"""The URLconf. Every view checks its permission (flywheel.core.access); tests enforce it."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from flywheel.core import views as core_views
from flywheel.core.access import public
from flywheel.ingest import api as ingest_api

urlpatterns = [
    path("healthz", core_views.healthz, name="healthz"),
    path("v1/traces", ingest_api.otlp_traces, name="otlp_traces"),
    path("v1/logs", ingest_api.otlp_logs, name="otlp_logs"),
    path("accounts/login/", public(auth_views.LoginView.as_view()), name="login"),
    path("accounts/logout/", public(auth_views.LogoutView.as_view()), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("flywheel.dashboards.urls")),
    path("triage/", include("flywheel.triage.urls")),
    path("", include("flywheel.ingest.urls")),
    path("", include("flywheel.datasets.urls")),
    path("", include("flywheel.training.urls")),
    path("", include("flywheel.registry.urls")),
    path("monitoring/", include("flywheel.monitoring.urls")),
    path("rewards/", include("flywheel.rewards.urls")),
    path("demo/", include("flywheel.demo.urls")),
    path("", include("flywheel.core.urls")),
]
