from django.urls import path

from flywheel.dashboards import views

app_name = "dashboards"

urlpatterns = [
    path("", views.home, name="home"),
    path("dashboards/", views.index, name="index"),
]
