from django.urls import path

from flywheel.training import views

app_name = "training"

urlpatterns = [
    path("jobs/", views.job_list, name="job_list"),
    path("jobs/new/", views.job_new, name="job_new"),
    path("jobs/<uuid:job_id>/", views.job_detail, name="job_detail"),
    path("jobs/<uuid:job_id>/live", views.job_live, name="job_live"),
    path("jobs/<uuid:job_id>/chart.json", views.job_chart, name="job_chart"),
    path("jobs/<uuid:job_id>/cancel/", views.job_cancel, name="job_cancel"),
    path("api/v1/jobs", views.api_jobs, name="api_jobs"),
]
