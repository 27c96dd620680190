from django.urls import path

from flywheel.rewards import views

app_name = "rewards"

urlpatterns = [
    path("", views.run_list, name="run_list"),
    path("new/", views.run_new, name="run_new"),
    path("<uuid:run_id>/", views.run_detail, name="run_detail"),
    path("<uuid:run_id>/outputs/<int:output_id>/mark/", views.output_mark, name="output_mark"),
    path("<uuid:run_id>/reverify/", views.run_reverify, name="run_reverify"),
    path("<uuid:run_id>/compare/", views.run_compare, name="run_compare"),
    path("<uuid:run_id>/judge/", views.run_judge, name="run_judge"),
    path("<uuid:run_id>/judge/launch/", views.run_judge_launch, name="run_judge_launch"),
    path("agents/<slug:agent_name>/judge-buckets/", views.judge_buckets, name="judge_buckets"),
    path("agents/<slug:agent_name>/judge-buckets/launch/", views.judge_buckets_launch, name="judge_buckets_launch"),
]
