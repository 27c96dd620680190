from django.urls import path

from flywheel.triage import views

app_name = "triage"

urlpatterns = [
    path("", views.queue_list, name="queue"),
    path("queues/new/", views.queue_new, name="queue_new"),
    path("queues/<int:queue_id>/", views.queue_detail, name="queue_detail"),
    path("queues/<int:queue_id>/edit/", views.queue_edit, name="queue_edit"),
    path("queues/<int:queue_id>/next/", views.queue_next, name="queue_next"),
    path("queues/<int:queue_id>/items/<uuid:trajectory_id>/remove/", views.queue_item_remove, name="queue_item_remove"),
    path("review/<uuid:trajectory_id>/", views.review, name="review"),
    path("review/<uuid:trajectory_id>/save/", views.review_save, name="review_save"),
    path("review/<uuid:trajectory_id>/correct/", views.review_correct, name="review_correct"),
    path("review/<uuid:trajectory_id>/interventions/", views.review_interventions, name="review_interventions"),
    path("trajectories/", views.trajectory_list, name="trajectory_list"),
    path("trajectories/bulk/", views.bulk, name="bulk"),
]
