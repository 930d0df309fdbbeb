"""A Hugging Face Hub id (`org/name`, `org/name@revision`): its config.json and its
safetensors headers, never the weights.

A cached id is read from the cache alone, without huggingface_hub
(kvcalc.model_source.hfcache: HF_HOME, HF_HUB_CACHE, refs and snapshots as it lays
them out): the snapshot `main` (or the revision given) points at, as HF_HUB_OFFLINE=1
reads it, whether or not the Hub has a newer commit (`hf download ORG/NAME config.json`
brings the cache up to date). Only what the cache lacks is asked of the Hub, through
huggingface_hub (imported then, and only then), which does what users expect of it: the
cache it fills, and a token from the usual places (HF_TOKEN, `hf auth login`) for gated
and private repos. Before it is asked, the Hub's host (or the proxy before it) must
accept a connection within 1.5 s, and the first request is made once: without a network
the answer is one line at once, not after huggingface_hub's 23 s of retries; with
HF_HUB_OFFLINE set the Hub is never asked.

config.json comes from hf_hub_download when the cache lacks it. The headers are read
from the cached files when the snapshot holds them all (the folder reader,
kvcalc.model_source.folder); online, when it does not, by HTTP range requests
(huggingface_hub's get_safetensors_metadata), and each is checked as a local one is.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvcalc.errors import KvcalcError, quoted
from kvcalc.model_source import hfcache
from kvcalc.model_source.safetensors import CheckpointBytes, checkpoint_bytes, tensor_bytes

# A repo id as the Hub spells one (huggingface_hub's validate_repo_id): owner/name, of
# letters, digits, '-', '_' and '.', at most 96 characters; then an optional @revision.
_REPO = r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*"
HUB_ID = re.compile(rf"(?P<repo>{_REPO})(?:@(?P<revision>[^\s@]+))?")


def parse_hub_id(text: str) -> tuple[str, str | None] | None:
    """(repo_id, revision or None) when `text` is spelt as a Hub id, else None."""
    m = HUB_ID.fullmatch(text)
    if m is None or len(m["repo"]) > 96 or ".." in m["repo"] or m["repo"].endswith("."):
        return None
    return m["repo"], m["revision"]


def _hub():
    try:
        import huggingface_hub
        from huggingface_hub.utils import disable_progress_bars, logging
    except ImportError:
        raise KvcalcError("reading a Hub id needs huggingface_hub: pip install "
                          "'kvcalc[hub]' (or give the model's folder)") from None
    # kvcalc says what went wrong in one line: not huggingface_hub's retry warnings, and
    # no progress bars for files of a few kB.
    logging.set_verbosity_error()
    disable_progress_bars()
    return huggingface_hub


def hub_files(repo_id: str, revision: str | None) -> tuple[Path, str]:
    """(the snapshot folder holding config.json, its commit or revision as shown) for
    the id: the cache's, else (online) hf_hub_download's; a KvcalcError of one line naming
    the id otherwise."""
    shown = repo_id + (f"@{revision}" if revision else "")
    snapshot = hfcache.cached_snapshot(repo_id, revision, shown)
    if snapshot is not None:
        return snapshot, shown
    cache = hfcache.hub_cache()
    if hfcache.offline():
        raise KvcalcError(f"{shown}: not in the Hugging Face cache ({cache}) and "
                          "HF_HUB_OFFLINE is set: download its config.json first, or unset "
                          "HF_HUB_OFFLINE")
    problem = hfcache.unreachable()
    if problem is not None:
        raise KvcalcError(f"{shown}: cannot reach the Hugging Face Hub ({problem}), and its "
                          f"config.json is not in the cache ({cache})")
    hub = _hub()
    try:
        # One HEAD request first, without hf_hub_download's retries (23 s of back-off when
        # the Hub does not answer and the cache has no copy), within huggingface_hub's
        # own HF_HUB_ETAG_TIMEOUT (10 s unless set).
        hub.get_hf_file_metadata(hub.hf_hub_url(repo_id, "config.json", revision=revision),
                                 timeout=hub.constants.HF_HUB_ETAG_TIMEOUT)
        config = Path(hub.hf_hub_download(repo_id, "config.json", revision=revision))
    except Exception as e:  # noqa: BLE001 - each kind is put in words below
        raise KvcalcError(_problem(hub, e, shown)) from None
    return config.parent, shown


def remote_checkpoint(repo_id: str, revision: str | None, shown: str) -> CheckpointBytes | None:
    """The headers of the id's safetensors files, fetched by HTTP range requests (a few
    kB to a few MB each); None when the repo has no safetensors files. Never offline."""
    problem = hfcache.unreachable()
    if problem is not None:
        raise KvcalcError(f"{shown}: cannot reach the Hugging Face Hub ({problem}) for its "
                          "safetensors headers; with HF_HUB_OFFLINE=1 kvcalc counts the "
                          "weights from config.json")
    hub = _hub()
    try:
        meta = hub.HfApi().get_safetensors_metadata(repo_id, revision=revision)
    except Exception as e:  # noqa: BLE001
        if type(e).__name__ == "NotASafetensorsRepoError":
            return None
        raise KvcalcError(_problem(hub, e, shown)) from None
    headers = []
    for name, file_meta in sorted(meta.files_metadata.items()):
        header = {t: {"dtype": info.dtype, "shape": list(info.shape),
                      "data_offsets": list(info.data_offsets)}
                  for t, info in file_meta.tensors.items()}
        headers.append(tensor_bytes(header, f"{shown}: {name}"))
    return checkpoint_bytes(headers)


def _problem(hub, e: Exception, shown: str) -> str:
    """One line for what huggingface_hub raised about `shown`."""
    from huggingface_hub import errors

    kind = type(e)
    if issubclass(kind, errors.GatedRepoError):
        return (f"{shown}: a gated model: accept its terms on huggingface.co, then log in "
                "(`hf auth login`, or HF_TOKEN)")
    if issubclass(kind, errors.RepositoryNotFoundError):
        return (f"{shown}: no such model on the Hugging Face Hub (a private one needs a "
                "token: `hf auth login`, or HF_TOKEN)")
    if issubclass(kind, errors.RevisionNotFoundError):
        return f"{shown}: the Hub has no such revision of this model"
    if issubclass(kind, errors.LocalEntryNotFoundError):
        cache = hub.constants.HF_HUB_CACHE
        if hub.constants.HF_HUB_OFFLINE:
            return (f"{shown}: not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE is "
                    "set: download its config.json first, or unset HF_HUB_OFFLINE")
        return (f"{shown}: cannot reach the Hugging Face Hub, and its config.json is not in "
                f"the cache ({cache})")
    if issubclass(kind, errors.EntryNotFoundError):
        return f"{shown}: the model has no config.json"
    if issubclass(kind, errors.HfHubHTTPError):
        status = getattr(getattr(e, "response", None), "status_code", None)
        return f"{shown}: the Hugging Face Hub answered {status or 'with an error'}"
    if isinstance(e, errors.HFValidationError):
        return f"{quoted(shown)} is not a valid Hub id (org/name, optional @revision)"
    if isinstance(e, errors.SafetensorsParsingError):
        return f"{shown}: a safetensors header on the Hub cannot be read"
    if isinstance(e, KvcalcError):
        return str(e)
    if isinstance(e, (ConnectionError, TimeoutError)) or any(
            w in kind.__name__ for w in ("Connect", "Timeout", "Network")):
        return (f"{shown}: cannot reach the Hugging Face Hub ({kind.__name__}); with "
                "HF_HUB_OFFLINE=1 kvcalc reads the cache only")
    if isinstance(e, OSError):
        from kvcalc.errors import os_problem

        return f"{shown}: {os_problem(e)}"
    return f"{shown}: {kind.__name__} from huggingface_hub"
