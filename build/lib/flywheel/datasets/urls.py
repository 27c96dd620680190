from django.urls import path

from flywheel.datasets import views

app_name = "datasets"

urlpatterns = [
    path("tasks/", views.task_list, name="task_list"),
    path("tasks/new/", views.task_new, name="task_new"),
    path("tasks/new/from-trajectory/<uuid:trajectory_id>/", views.task_from_trajectory, name="task_from_trajectory"),
    path("tasks/<uuid:task_id>/", views.task_detail, name="task_detail"),
    path("tasks/<uuid:task_id>/edit/", views.task_edit, name="task_edit"),
    path("pairs/", views.pair_list, name="pair_list"),
    path("pairs/export.jsonl", views.pair_export, name="pair_export"),
    path("pairs/snapshots/new/", views.pair_snapshot_new, name="pair_snapshot_new"),
    path("corrections/export.jsonl", views.correction_export, name="correction_export"),
    path("api/v1/agents/<slug:agent_name>/pairs.jsonl", views.api_pairs, name="api_pairs"),
    path("api/v1/agents/<slug:agent_name>/corrections.jsonl", views.api_corrections, name="api_corrections"),
    path("synthetic/", views.synthetic_list, name="synthetic_list"),
    path("synthetic/new/", views.synthetic_new, name="synthetic_new"),
    path("synthetic/<uuid:batch_id>/", views.synthetic_detail, name="synthetic_detail"),
    path("synthetic/<uuid:batch_id>/accept/", views.synthetic_accept, name="synthetic_accept"),
    path("snapshots/", views.snapshot_list, name="snapshot_list"),
    path("snapshots/new/", views.snapshot_new, name="snapshot_new"),
    path("snapshots/<uuid:snapshot_id>/", views.snapshot_detail, name="snapshot_detail"),
    path("snapshots/<uuid:snapshot_id>/export/<slug:format_name>.jsonl", views.snapshot_export, name="snapshot_export"),
]
