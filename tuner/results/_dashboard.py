"""`tuner dashboard`: optuna-dashboard on the study's storage, with the server logs as artifacts."""

from __future__ import annotations

import sys
from pathlib import Path

from .._errors import UsageError
from .._redact import redact_url
from ..search import open_storage, stored_study_names
from ..trial import port_is_free


def serve(storage_url: str, host: str, port: int, workdir: str, study: str | None = None) -> None:
    """`study`: the one whose page to open (--study, or the last run's where the storage holds several);
    optuna-dashboard serves them all, from its list of studies."""
    from optuna.artifacts import FileSystemArtifactStore
    from optuna_dashboard import run_server

    if not port_is_free(host, port):
        raise UsageError(f"port {port} is in use on {host}", "pass --port with a free port")
    names = stored_study_names(storage_url)  # a storage without a study is refused before anything is created
    if study is not None and study not in names:
        raise UsageError(f"no study '{study}' in {redact_url(storage_url)}",
                         f"pass --study with one of: {', '.join(names)}")
    storage = open_storage(storage_url, heartbeat=False)
    artifacts = Path(workdir) / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    page = ""
    if study is not None:
        page = f"dashboard/studies/{storage.get_study_id_from_name(study)}"
    print(f"optuna-dashboard on http://{host}:{port}/{page} (storage {redact_url(storage_url)}, logs from "
          f"{artifacts})", file=sys.stderr, flush=True)
    run_server(storage, host=host, port=port, artifact_store=FileSystemArtifactStore(str(artifacts)))
