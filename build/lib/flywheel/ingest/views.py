"""Pages of the ingest app: the trajectory list, the trace viewer, uploads and their progress."""

from __future__ import annotations

from uuid import UUID

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from flywheel.core.access import AuthedRequest, permission_required
from flywheel.core.roles import Perm
from flywheel.core.selectors import ingest_refusal
from flywheel.ingest import selectors, services
from flywheel.ingest.forms import TrajectoryFilterForm, UploadForm
from flywheel.ingest.models import Upload


@permission_required(Perm.VIEW)
def trajectory_list(request: AuthedRequest) -> HttpResponse:
    form = TrajectoryFilterForm(request.GET)
    after = selectors.Cursor.decode(request.GET.get("after", ""))
    rows, next_cursor = selectors.trajectory_page(filters=form.filters(), viewer=request.user, after=after)
    query = request.GET.copy()
    query.pop("after", None)
    context = {
        "form": form,
        "trajectories": rows,
        "next_query": f"{query.urlencode()}&after={next_cursor.encode()}" if next_cursor else None,
        "first_query": query.urlencode() if after else None,
    }
    return render(request, "ingest/trajectory_list.html", context)


@permission_required(Perm.VIEW)
def trajectory_detail(request: AuthedRequest, trajectory_id: UUID) -> HttpResponse:
    trajectory = selectors.trajectory_with_steps(trajectory_id=trajectory_id, viewer=request.user)
    if trajectory is None:
        raise Http404("no such trajectory")
    return render(request, "ingest/trajectory_detail.html", {"trajectory": trajectory})


class _SizeLimitHandler(FileUploadHandler):
    """Stops an upload sent without Content-Length once it passes the limit."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit, self.received, self.exceeded = limit, 0, False

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.exceeded = True
            raise StopUpload(connection_reset=True)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


def _too_large(request: AuthedRequest) -> HttpResponse:
    context = {
        "form": UploadForm(),
        "uploads": selectors.upload_recent(viewer=request.user),
        "too_large": settings.INGEST_MAX_UPLOAD_BYTES,
    }
    return render(request, "ingest/upload_form.html", context, status=413)


@permission_required(Perm.INGEST)
@csrf_exempt  # the CSRF check runs in _upload_form, after the size limit is in place
def upload_new(request: AuthedRequest) -> HttpResponse:
    limit = settings.INGEST_MAX_UPLOAD_BYTES
    if int(request.META.get("CONTENT_LENGTH") or 0) > limit + 64 * 1024:
        return _too_large(request)
    request.upload_handlers.insert(0, _SizeLimitHandler(request, limit))
    return _upload_form(request)


@csrf_protect
def _upload_form(request: AuthedRequest) -> HttpResponse:
    form = UploadForm(request.POST or None, request.FILES or None)
    if any(getattr(handler, "exceeded", False) for handler in request.upload_handlers):
        return _too_large(request)
    # Records that name another agent are refused one by one as the file is read (IngestOptions.agents_allowed).
    refusal = ingest_refusal(user=request.user, agent_name=form.data["agent"]) if form.data.get("agent") else None
    if refusal:
        form.add_error("agent", refusal)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            upload = services.upload_create(
                user=request.user,
                file=data["file"],
                format=data["format"],
                mapping=data["mapping"],
                agent_name=data["agent"],
                source=data["source"],
                redact_patterns=data["redact"],
                redact_custom=data["redact_custom"],
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            return redirect("ingest:upload_detail", upload_id=upload.id)
    context = {"form": form, "uploads": selectors.upload_recent(viewer=request.user)}
    return render(request, "ingest/upload_form.html", context, status=403 if refusal else 200)


def _upload(request: AuthedRequest, upload_id: UUID) -> Upload:
    upload = selectors.upload_get(upload_id=upload_id, viewer=request.user)
    if upload is None:
        raise Http404("no such upload")
    return upload


@permission_required(Perm.VIEW)
def upload_detail(request: AuthedRequest, upload_id: UUID) -> HttpResponse:
    return render(request, "ingest/upload_detail.html", {"upload": _upload(request, upload_id)})


@permission_required(Perm.VIEW)
def upload_progress(request: AuthedRequest, upload_id: UUID) -> HttpResponse:
    return render(request, "ingest/_upload_progress.html", {"upload": _upload(request, upload_id)})
