"""The local Hugging Face cache, read as huggingface_hub lays it out, without importing
huggingface_hub (some 350 ms of start-up: httpx, tqdm, certifi), and a quick check that
the Hub can be reached before asking it anything.

Where the cache is (huggingface_hub's constants.py, each value with `~` and `$VARS`
expanded as it expands them): HF_HUB_CACHE, else HUGGINGFACE_HUB_CACHE, else
$HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.

Its layout (huggingface_hub's docs, "Manage the cache"):
    models--<org>--<name>/refs/<revision>       the commit a branch or tag points at
    models--<org>--<name>/snapshots/<commit>/   each file, a link to its blob
A revision spelt as a full commit (40 hex digits) names its snapshot itself, as
hf_hub_download reads it.

Offline mode is huggingface_hub's: HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set to 1,
ON, YES or TRUE, any case.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

from kvcalc.errors import KvcalcError, os_problem

DEFAULT_ENDPOINT = "https://huggingface.co"
# How long the Hub's host (or the proxy before it) has to accept a connection before
# kvcalc says it cannot be reached: huggingface_hub itself retries a failed first
# request for some 23 s (1 + 2 + 4 + 8 + 8 s of back-off) before it gives up.
CONNECT_TIMEOUT_S = 1.5

_TRUE = ("1", "ON", "YES", "TRUE")  # huggingface_hub's ENV_VARS_TRUE_VALUES
_COMMIT = re.compile(r"[0-9a-f]{40}")  # huggingface_hub's REGEX_COMMIT_HASH
_NAME = re.compile(r"[A-Za-z0-9._-]+")  # one path part of a revision or a ref's commit


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as huggingface_hub reads it."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.upper() in _TRUE


def hub_cache() -> Path:
    """The cache folder huggingface_hub uses (module docstring: the order)."""
    default_home = os.path.join(os.path.expanduser("~"), ".cache")
    home = os.path.expandvars(os.path.expanduser(os.getenv(
        "HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", default_home), "huggingface"))))
    legacy = os.getenv("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub"))
    return Path(os.path.expandvars(os.path.expanduser(os.getenv("HF_HUB_CACHE", legacy))))


def repo_folder(repo_id: str) -> Path:
    return hub_cache() / f"models--{repo_id.replace('/', '--')}"


def cached_snapshot(repo_id: str, revision: str | None, shown: str) -> Path | None:
    """The snapshot folder of the id at `revision` (default main) when the cache holds its
    config.json, else None. A config.json that is a loop of symbolic links is said as
    what it is (huggingface_hub would take it for a missing one)."""
    repo = repo_folder(repo_id)
    commit = _commit(repo, revision or "main")
    if commit is None:
        return None
    snapshot = repo / "snapshots" / commit
    try:
        st = os.stat(snapshot / "config.json")
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise KvcalcError(f"{shown}: its config.json in the cache ({repo}) is a loop of "
                              "symbolic links") from None
        return None
    except ValueError:  # a NUL in the path
        return None
    return snapshot if stat.S_ISREG(st.st_mode) else None


def _commit(repo: Path, revision: str) -> str | None:
    """The commit `revision` names in the cache: itself when it is one, else what
    refs/<revision> holds; None when neither, or when either would climb out of the
    repo's folder."""
    parts = revision.split("/")
    if not all(_NAME.fullmatch(p) and p not in (".", "..") for p in parts):
        return None
    if _COMMIT.fullmatch(revision):
        return revision
    try:
        commit = (repo / "refs" / revision).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return commit if _NAME.fullmatch(commit) and commit not in (".", "..") else None


def unreachable(timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why the Hub (HF_ENDPOINT, default huggingface.co), or the proxy the environment
    names for it (HTTPS_PROXY, ALL_PROXY, ... unless NO_PROXY exempts it), does not accept
    a TCP connection within `timeout_s`, in a few words; None when it does. The name is
    looked up in a thread, so a resolver that hangs cannot hold the answer either."""
    import socket
    import threading
    from urllib.parse import urlsplit

    host, port = _target(urlsplit(os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).strip()))
    if not host:
        return "HF_ENDPOINT names no host"
    outcome: list[BaseException | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except (OSError, ValueError, UnicodeError) as e:
            outcome.append(e)
        else:
            outcome.append(None)

    thread = threading.Thread(target=connect, name="kvcalc-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    e = outcome[0]
    if e is None:
        return None
    if isinstance(e, socket.gaierror):
        return f"cannot look up {host}"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    if isinstance(e, ConnectionRefusedError):
        return f"{host}:{port} refused the connection"
    if isinstance(e, OSError):
        return f"{host}:{port}: {os_problem(e)}"
    return f"{host}: not a host name"


_PORTS = {"http": 80, "https": 443, "socks4": 1080, "socks5": 1080, "socks5h": 1080}


def _target(endpoint) -> tuple[str | None, int]:
    """(host, port) a request to `endpoint` first connects to: its proxy's, if any."""
    from urllib.request import getproxies_environment, proxy_bypass_environment

    target = endpoint
    proxies = getproxies_environment()
    proxy = proxies.get(endpoint.scheme) or proxies.get("all")
    if proxy and endpoint.hostname and not proxy_bypass_environment(endpoint.hostname):
        from urllib.parse import urlsplit

        target = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:
        port = target.port
    except ValueError:
        port = None
    return target.hostname, port or _PORTS.get(target.scheme, 443)
