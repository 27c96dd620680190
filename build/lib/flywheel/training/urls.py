from django.urls import path

from flywheel.training import views

app_name = "training"

urlpatterns = [
    path("jobs/", views.job_list, name="job_list"),
    path("jobs/compare/", views.job_compare, name="job_compare"),
    path("jobs/new/", views.job_new, name="job_new"),
    path("jobs/<uuid:job_id>/", views.job_detail, name="job_detail"),
    path("jobs/<uuid:job_id>/live", views.job_live, name="job_live"),
    path("jobs/<uuid:job_id>/samples", views.job_samples, name="job_samples"),
    path("jobs/<uuid:job_id>/samples/<int:sample_id>/episode/", views.sample_episode, name="sample_episode"),
    path("jobs/<uuid:job_id>/chart.json", views.job_chart, name="job_chart"),
    path("jobs/<uuid:job_id>/cancel/", views.job_cancel, name="job_cancel"),
    path("jobs/<uuid:job_id>/evaluation/", views.eval_detail, name="eval_detail"),
    path("jobs/<uuid:job_id>/evaluation/prompt-change/", views.prompt_change, name="prompt_change"),
    path("jobs/<uuid:job_id>/evaluation/episodes/<int:index>/", views.eval_episode, name="eval_episode"),
    path("api/v1/jobs", views.api_jobs, name="api_jobs"),
]
