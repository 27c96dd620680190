from django.urls import path

from flywheel.ingest import api, views

app_name = "ingest"

urlpatterns = [
    path("trajectories/", views.trajectory_list, name="trajectory_list"),
    path("trajectories/<uuid:trajectory_id>/", views.trajectory_detail, name="trajectory_detail"),
    path("uploads/new/", views.upload_new, name="upload_new"),
    path("uploads/<uuid:upload_id>/", views.upload_detail, name="upload_detail"),
    path("uploads/<uuid:upload_id>/progress", views.upload_progress, name="upload_progress"),
    path("api/v1/trajectories", api.trajectories, name="api_trajectories"),
    path("api/v1/trajectories/<uuid:trajectory_id>/feedback", api.trajectory_feedback, name="api_feedback"),
    path("api/v1/trajectories/by-external-id/<path:external_id>/feedback", api.trajectory_feedback_by_external_id,
         name="api_feedback_by_external_id"),  # fmt: skip
]
