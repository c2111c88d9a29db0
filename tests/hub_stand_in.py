"""A local stand-in for the Hugging Face Hub's HTTP API, for `huggingface_hub` pointed at it by HF_ENDPOINT.

It serves what `HfApi.whoami`, `create_repo`, `model_info` and `create_commit` call:
`GET /api/whoami-v2`, `POST /api/repos/create`, `GET /api/models/<ns>/<name>[/revision/<rev>]`,
`POST /api/validate-yaml`, `POST /api/models/<ns>/<name>/preupload/<rev>` and
`POST /api/models/<ns>/<name>/commit/<rev>` (ndjson: a header line, then files); and what a
download (`hf_hub_download`, `snapshot_download`, `from_pretrained`) calls: `HEAD`/`GET
/<ns>/<name>/resolve/<rev>/<path>` with the `X-Repo-Commit` and `ETag` headers, a missing file
answered 404 `EntryNotFound`, and `GET /api/models/<ns>/<name>/tree/<rev>[/<path>]`. Preupload answers
"regular" for every file, so the client sends each file base64-encoded inside the commit; the Hub's
LFS/Xet upload route (the client's `hf_xet` path for large or binary files) is never taken, and an
`lfsFile` line in a commit is refused with 400.

Every request is recorded (`requests`), also refused ones; a request without `Authorization: Bearer
<token>` gets 401 like the Hub. Repos keep their files (path -> bytes), visibility and commits.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

_REPO = r"(?P<repo>[^/]+/[^/]+)"
ROUTES = [
    ("GET", re.compile(r"^/api/whoami-v2$"), "whoami"),
    ("POST", re.compile(r"^/api/repos/create$"), "create_repo"),
    ("POST", re.compile(r"^/api/validate-yaml$"), "validate_yaml"),
    ("GET", re.compile(rf"^/api/models/{_REPO}(?:/revision/(?P<rev>[^/]+))?$"), "model_info"),
    ("POST", re.compile(rf"^/api/models/{_REPO}/preupload/(?P<rev>[^/]+)$"), "preupload"),
    ("POST", re.compile(rf"^/api/models/{_REPO}/commit/(?P<rev>[^/]+)$"), "commit"),
    ("GET", re.compile(rf"^/api/models/{_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$"), "tree"),
    ("GET", re.compile(rf"^/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
    ("HEAD", re.compile(rf"^/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
]


@dataclass
class RawFile:
    """A reply that is a file's bytes, not JSON."""

    content: bytes
    headers: dict[str, str]


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    status: int = 0


@dataclass
class Commit:
    oid: str
    message: str
    description: str
    files: dict[str, bytes]


@dataclass
class Repo:
    repo_id: str
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[Commit] = field(default_factory=list)

    @property
    def sha(self) -> str:
        return self.commits[-1].oid if self.commits else "0" * 40


class _Reply(Exception):
    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers or {}


def _add_commit(repo: Repo, summary: str, description: str, files: dict[str, bytes]) -> str:
    """Record a commit of `files` on `repo` (its id hashes the parent, the summary and the files)."""
    digest = hashlib.sha1(repo.sha.encode() + summary.encode())
    for path, content in sorted(files.items()):
        digest.update(path.encode() + b"\0" + content)
    repo.files.update(files)
    repo.commits.append(Commit(digest.hexdigest(), summary, description, files))
    return repo.sha


def _etag(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def _front_matter(content: str) -> Any:
    match = re.match(r"^---\n(.*?)\n---\n", content, re.DOTALL)
    return yaml.safe_load(match.group(1)) if match else {}


class HubStandIn:
    """The stand-in server; use as a context manager, then set HF_ENDPOINT=stand_in.base_url."""

    def __init__(self, token: str, user: str = "forge-tester") -> None:
        self.token = token
        self.user = user
        self.whoami_status = 200  # set to e.g. 503 to make whoami unavailable
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> HubStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def seed_repo(self, repo_id: str, *, private: bool) -> Repo:
        self.repos[repo_id] = Repo(repo_id, private)
        return self.repos[repo_id]

    def seed_files(self, repo_id: str, files: dict[str, bytes], *, private: bool = False) -> str:
        """Create (or add to) a repo with `files` in one commit, without HTTP; return the commit."""
        repo = self.repos.get(repo_id) or self.seed_repo(repo_id, private=private)
        return _add_commit(repo, "seed", "", files)

    def count(self, path_part: str = "") -> int:
        return sum(path_part in r.path for r in self.requests)

    # ---- the endpoints ----

    def whoami(self, req: Request, **_: str) -> Any:
        if self.whoami_status != 200:
            raise _Reply(self.whoami_status, {"error": "whoami is unavailable"})
        return {"type": "user", "name": self.user, "fullname": "Forge Tester", "orgs": []}

    def create_repo(self, req: Request, **_: str) -> Any:
        payload = json.loads(req.body)
        if payload.get("type", "model") != "model":
            raise _Reply(400, {"error": "the stand-in serves model repos only"})
        repo_id = f"{payload.get('organization') or self.user}/{payload['name']}"
        url = f"{self.base_url}/{repo_id}"
        if repo_id in self.repos:
            raise _Reply(409, {"error": "You already created this model repo", "url": url})
        self.repos[repo_id] = Repo(repo_id, private=payload.get("visibility") == "private")
        return {"url": url, "name": repo_id, "id": repo_id}

    def validate_yaml(self, req: Request, **_: str) -> Any:
        try:
            meta = _front_matter(json.loads(req.body)["content"])
        except yaml.YAMLError as exc:
            raise _Reply(400, {"errors": [{"message": f"invalid YAML: {exc}"}], "warnings": []}) from None
        if not isinstance(meta, dict):
            raise _Reply(400, {"errors": [{"message": "metadata must be a mapping"}], "warnings": []})
        return {"errors": [], "warnings": []}

    def model_info(self, req: Request, repo: str, rev: str | None = None) -> Any:
        found = self._repo(repo)
        siblings = [{"rfilename": path} for path in sorted(found.files)]
        return {"id": found.repo_id, "private": found.private, "sha": found.sha, "siblings": siblings}

    def tree(self, req: Request, repo: str, rev: str, path: str | None = None) -> Any:
        found = self._at(repo, rev)
        prefix = f"{unquote(path).strip('/')}/" if path else ""
        entries = [p for p in sorted(found.files) if p.startswith(prefix)]
        if prefix and not entries:
            raise _Reply(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
        return [
            {"type": "file", "path": p, "size": len(found.files[p]), "oid": _etag(found.files[p])}
            for p in entries
        ]

    def resolve(self, req: Request, repo: str, rev: str, path: str) -> RawFile:
        found = self._at(repo, rev)
        content = found.files.get(unquote(path))
        if content is None:
            raise _Reply(
                404,
                {"error": "Entry not found"},
                {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": found.sha},
            )
        return RawFile(content, {"X-Repo-Commit": found.sha, "ETag": f'"{_etag(content)}"'})

    def preupload(self, req: Request, repo: str, rev: str) -> Any:
        self._repo(repo)
        files = json.loads(req.body)["files"]
        return {
            "files": [
                {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                for f in files
            ]
        }

    def commit(self, req: Request, repo: str, rev: str) -> Any:
        found = self._repo(repo)
        if unquote(rev) != "main":
            raise _Reply(400, {"error": "the stand-in commits to main only"})
        lines = [json.loads(line) for line in req.body.splitlines() if line.strip()]
        header = next(item["value"] for item in lines if item["key"] == "header")
        files: dict[str, bytes] = {}
        for item in lines:
            if item["key"] == "lfsFile":
                raise _Reply(400, {"error": "the stand-in stores regular (base64) files only"})
            if item["key"] == "file":
                files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
        oid = _add_commit(found, header["summary"], header.get("description", ""), files)
        return {"commitUrl": f"{self.base_url}/{repo}/commit/{oid}", "commitOid": oid, "pullRequestUrl": None}

    def _at(self, repo_id: str, rev: str) -> Repo:
        """The repo, when `rev` names its branch or its current commit (older commits are not kept)."""
        found = self._repo(repo_id)
        if unquote(rev) not in ("main", found.sha):
            raise _Reply(404, {"error": "Revision not found"}, {"X-Error-Code": "RevisionNotFound"})
        return found

    def _repo(self, repo_id: str) -> Repo:
        found = self.repos.get(unquote(repo_id))
        if found is None:
            raise _Reply(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        return found

    # ---- the HTTP plumbing ----

    def _dispatch(self, req: Request) -> tuple[int, Any, dict[str, str]]:
        if req.headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"error": "Invalid credentials in Authorization header"}, {}
        for method, pattern, name in ROUTES:
            match = pattern.match(req.path)
            if match and method == req.method:
                try:
                    with self._lock:
                        return 200, getattr(self, name)(req, **match.groupdict()), {}
                except _Reply as reply:
                    return reply.status, reply.body, reply.headers
        return 404, {"error": f"the stand-in does not serve {req.method} {req.path}"}, {}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while size := int(self.rfile.readline().strip() or b"0", 16):
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    self.rfile.readline()
                    return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _handle(self) -> None:
                url = urlsplit(self.path)
                req = Request(
                    self.command,
                    url.path,
                    url.query,
                    {k.lower(): v for k, v in self.headers.items()},
                    self._body(),
                )
                with stand_in._lock:
                    stand_in.requests.append(req)
                status, body, headers = stand_in._dispatch(req)
                req.status = status
                if isinstance(body, RawFile):
                    data, kind, headers = (
                        body.content,
                        "application/octet-stream",
                        {**headers, **body.headers},
                    )
                else:
                    data, kind = json.dumps(body).encode(), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

        return Handler
