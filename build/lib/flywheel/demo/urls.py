from django.urls import path

from flywheel.demo import views

app_name = "demo"

urlpatterns = [
    path("run/", views.loop_start, name="loop_start"),
]
