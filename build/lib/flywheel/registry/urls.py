from django.urls import path

from flywheel.registry import views

app_name = "registry"

urlpatterns = [
    path("models/", views.version_list, name="version_list"),
    path("models/<slug:agent_name>/", views.agent_versions, name="agent_versions"),
    path("models/<slug:agent_name>/rollback/", views.agent_rollback, name="agent_rollback"),
    path("models/<slug:agent_name>/gate-policy/", views.gate_policy_update, name="gate_policy_update"),
    path("models/<slug:agent_name>/v<int:number>/", views.version_detail, name="version_detail"),
    path("models/<slug:agent_name>/v<int:number>/adapter.zip", views.version_download, name="version_download"),
    path("models/<slug:agent_name>/v<int:number>/promote/", views.version_promote, name="version_promote"),
    path("models/<slug:agent_name>/v<int:number>/gate/", views.gate_launch, name="gate_launch"),
    path("gates/<uuid:gate_id>/", views.gate_detail, name="gate_detail"),
    path("evaluations/<uuid:baseline_job_id>/vs/<uuid:candidate_job_id>/", views.eval_compare, name="eval_compare"),
    path("trajectories/<uuid:trajectory_id>/replays/", views.trajectory_replays, name="trajectory_replays"),
    path("trajectories/<uuid:trajectory_id>/replays/new/", views.replay_launch, name="replay_launch"),
    path("replays/<uuid:replay_id>/", views.replay_detail, name="replay_detail"),
    path("api/v1/agents/<slug:agent_name>/live", views.api_live, name="api_live"),
    path("v1/chat/completions", views.chat_completions, name="chat_completions"),
]
