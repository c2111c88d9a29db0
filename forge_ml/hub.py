"""The Hugging Face Hub: the only module that talks to it, through `huggingface_hub`.

`HubClient(token).push(...)` creates the model repo (private unless asked otherwise) and commits
the adapter, its tokenizer and a model card (forge_ml/model_card.py) in one commit.
The token comes from the `HF_TOKEN` environment variable only (`hub_token()`), is handed to
`huggingface_hub` and goes nowhere else. The Hub address is `huggingface_hub`'s own: `HF_ENDPOINT`,
else https://huggingface.co. Importing this module sends nothing: `huggingface_hub` is imported by
the functions that make requests.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from forge_ml.errors import InputError, RuntimeFault, describe, first_line
from forge_ml.secrets import redact_text

TOKEN_ENV = "HF_TOKEN"
# a Hub repo id: namespace/name, letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 per part
_PART = r"(?!.*(?:--|\.\.))[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9])?"
REPO_ID = re.compile(rf"^{_PART}/{_PART}$")


class TokenRefused(InputError):
    """The Hub answered 401/403: the token is wrong or may not write there."""


def hub_token() -> str:
    """Return `HF_TOKEN` from the environment; InputError (exit 1) when it is unset."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise InputError(
            f"{TOKEN_ENV} is not set: export {TOKEN_ENV} with a Hugging Face token that can write "
            "to the repo (https://huggingface.co/settings/tokens); nothing was sent"
        )
    return token


def check_repo_id(repo_id: str) -> str:
    """Return `repo_id` when it is a valid `namespace/name`; InputError naming it otherwise."""
    if not REPO_ID.match(repo_id):
        raise InputError(
            f"--repo {repo_id!r}: expected namespace/name (letters, digits, '-', '_', '.'; "
            "at most 96 characters each, no '--' or '..')"
        )
    return repo_id


def repo_name(project_name: str) -> str:
    """Return the project name as a valid Hub repo name: accents dropped (`voyages-été` gives
    `voyages-ete`), other characters become '-'."""
    name = "".join(c for c in unicodedata.normalize("NFKD", project_name) if not unicodedata.combining(c))
    name = re.sub(r"[^A-Za-z0-9_.]+", "-", name)
    name = re.sub(r"-{2,}", "-", re.sub(r"\.{2,}", ".", name)).strip("-.")[:96].strip("-.")
    return name or "model"


@dataclass
class PushResult:
    """What the Hub answered to a push."""

    repo_id: str
    url: str
    commit: str
    commit_url: str
    private: bool
    files: list[str]


class HubClient:
    """An authenticated `huggingface_hub.HfApi`; every failure becomes a ForgeError naming what failed."""

    def __init__(self, token: str) -> None:
        from huggingface_hub import HfApi

        from forge_ml import __version__

        self.api = HfApi(token=token, library_name="forge-ml", library_version=__version__)

    @property
    def endpoint(self) -> str:
        return self.api.endpoint

    def user(self) -> str:
        """Return the name of the token's user (`/api/whoami-v2`); InputError asking for --repo when unknown."""
        try:
            with self._errors("reading the token's user (whoami)"):
                name = self.api.whoami().get("name")
        except TokenRefused:
            raise
        except InputError as exc:
            raise InputError(f"{exc}; pass --repo namespace/name to push without it") from None
        except RuntimeFault as exc:  # the Hub did not answer: a retry may help
            raise RuntimeFault(
                f"{exc}; try again, or pass --repo namespace/name to push without it"
            ) from None
        if not name:
            raise InputError(f"{self.endpoint}/api/whoami-v2 named no user; pass --repo namespace/name")
        return str(name)

    def push(
        self,
        repo_id: str,
        files: dict[str, Path | bytes],
        *,
        private: bool,
        message: str,
        description: str = "",
    ) -> PushResult:
        """Create `repo_id` when missing and commit `files` (path in repo -> local file or bytes) to main.

        An existing public repo is refused while `private` is asked for: nothing private-by-default
        ever lands in a public repo. An existing repo keeps its visibility (the result says which).
        """
        from huggingface_hub import CommitOperationAdd

        with self._errors(f"creating {repo_id}"):
            url = self.api.create_repo(repo_id, private=private, exist_ok=True)
        with self._errors(f"reading {repo_id}"):
            is_private = bool(self.api.model_info(repo_id).private)
        if private and not is_private:
            raise InputError(
                f"{repo_id} already exists on {self.endpoint} and is public; nothing was uploaded. "
                "Pass --public to push to it, or choose another --repo"
            )
        operations = [
            CommitOperationAdd(path_in_repo=path, path_or_fileobj=content)
            for path, content in sorted(files.items())
        ]
        with self._errors(f"uploading to {repo_id}"):
            commit = self.api.create_commit(
                repo_id, operations, commit_message=message, commit_description=description
            )
        return PushResult(repo_id, str(url), commit.oid, commit.commit_url, is_private, sorted(files))

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

        try:
            yield
        except OfflineModeIsEnabled:
            raise InputError(f"HF_HUB_OFFLINE is set: unset it to push to the Hub ({doing})") from None
        except HfHubHTTPError as exc:
            status = exc.response.status_code if exc.response is not None else None
            first = redact_text(first_line(exc))
            if status in (401, 403):
                raise TokenRefused(
                    f"the Hub at {self.endpoint} refused {TOKEN_ENV} while {doing} (HTTP {status}): "
                    "use a token with write access to the repo"
                ) from None
            if status is not None and 400 <= status < 500 and status != 429:
                raise InputError(f"{doing} on {self.endpoint} failed: HTTP {status} ({first})") from None
            raise RuntimeFault(f"{doing} on {self.endpoint} failed: {first}") from None
        except (OSError, ValueError) as exc:
            raise RuntimeFault(f"{doing} on {self.endpoint} failed ({describe(exc)})") from None
        except Exception as exc:  # transport errors of huggingface_hub's HTTP client (httpx2): retry may help
            if "httpx" not in type(exc).__module__:
                raise
            raise RuntimeFault(
                f"the Hub at {self.endpoint} is unreachable while {doing} ({describe(exc)})"
            ) from None


def hub_snapshot(repo_id: str, revision: str | None) -> tuple[str, str | None]:
    """Return the local directory of a Hub model (downloaded once for every trial of the round) and its commit.

    The commit is the snapshot's own (a branch or tag resolved), so what trained on it can name it.
    """
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(repo_id, revision=revision)
    except Exception as exc:
        raise RuntimeFault(f"model.name_or_path: cannot fetch {repo_id!r} from the Hub ({exc})") from exc
    return path, _snapshot_commit(path)


def transient_failure(exc: BaseException) -> bool:
    """Whether a failed Hub request may succeed on a retry: no connection, a timeout, HTTP 429 or 5xx.

    Walks the exception's causes: transformers wraps the Hub's errors in an OSError.
    """
    from huggingface_hub.errors import HfHubHTTPError

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, HfHubHTTPError):
            status = current.response.status_code if current.response is not None else None
            return status is None or status == 429 or status >= 500
        transport = type(current).__module__.split(".")[0] in {"httpx", "httpx2", "httpcore", "httpcore2"}
        if isinstance(current, ConnectionError | TimeoutError) or transport:
            return True
        current = current.__cause__ or current.__context__
    return False


def hub_offline() -> bool:
    """Whether the user turned the Hub off (`HF_HUB_OFFLINE`, as huggingface_hub reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def cached_snapshot(repo_id: str, revision: str | None) -> tuple[str, str | None] | None:
    """Return (directory, commit) of a snapshot already in the local HF cache, or None; sends nothing."""
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(repo_id, revision=revision, local_files_only=True)
    except Exception:  # not cached (LocalEntryNotFoundError and kin)
        return None
    return path, _snapshot_commit(path)


def endpoint() -> str:
    """The Hub's base URL: `HF_ENDPOINT`, else huggingface_hub's default."""
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT") or constants.ENDPOINT


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub's host opens within `timeout_s` (no request is sent)."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(endpoint())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _snapshot_commit(path: str) -> str | None:
    """The commit of an HF cache snapshot directory (the cache names each snapshot by its commit hash)."""
    name = Path(path).name
    return name if re.fullmatch(r"[0-9a-f]{40}", name) else None
