"""The user's project directory: finding it, resolving paths inside it, scaffolding a new one."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forge_ml.errors import InputError, describe
from forge_ml.fileio import pid_alive
from forge_ml.packaged import conf_root, examples_root

CONFIG_FILE = "forge.yaml"
GENERATOR_FILE = "generator.py"  # the project's own offline data: generate(n, *, seed, focus)
PROBE_FILE = "dataset/probe.jsonl"  # `forge-ml probe`: {"question", "ideal"} per line
CORPUS_DIR = "dataset/corpus"  # `forge-ml pretrain`: raw text
LOCK = "flywheel.lock"


@dataclass(frozen=True)
class Project:
    """A project directory; every relative path in forge.yaml resolves against `root`."""

    root: Path

    @property
    def config_file(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def output(self) -> Path:
        return self.root / "output"

    def resolve(self, path: str | Path) -> Path:
        """Return `path` made absolute against the project root (never the working directory)."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.root / p)

    def output_path(self, *parts: str) -> Path:
        path = self.output.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def mission_summary(self) -> str:
        """The task in a few lines: mission.md's first paragraph under its title (else the project's name)."""
        path = self.root / "mission.md"
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        paragraphs = [p.strip() for p in text.split("\n\n") if p.strip() and not p.lstrip().startswith("#")]
        return " ".join(paragraphs[0].split()) if paragraphs else f"forge-ml project {self.root.name}"

    @property
    def default_tracking_uri(self) -> str:
        return f"sqlite:///{self.root / 'mlflow.db'}"


BOM = "\ufeff"  # a UTF-8 byte-order mark, as Windows tools write one: read past it
UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")
UTF16_HINT = "the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8"


def read_utf8(path: Path) -> str:
    """Return a text file's content (without a UTF-8 byte-order mark); InputError naming the file and the
    line of the first byte not UTF-8, or a UTF-16 file."""
    data = path.read_bytes()
    if data.startswith(UTF16_MARKS):
        raise InputError(f"{path}: {UTF16_HINT}")
    try:
        return data.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(f"{path}:{line}: not valid UTF-8 ({exc.reason} at column {column})") from None


def find_project(start: str | Path | None = None, *, explicit: bool = False) -> Project:
    """Return the project at `start` (or the nearest parent holding forge.yaml)."""
    here = Path(start or Path.cwd()).expanduser().resolve()
    if explicit:
        if not (here / CONFIG_FILE).is_file():
            raise InputError(f"{here}: no {CONFIG_FILE} here; create a project with `forge-ml init NAME`")
        return Project(here)
    for candidate in (here, *here.parents):
        if (candidate / CONFIG_FILE).is_file():
            return Project(candidate)
    raise InputError(
        f"no {CONFIG_FILE} in {here} or its parents; run inside a project, pass -p DIR, "
        "or create one with `forge-ml init NAME`"
    )


def packaged_examples() -> dict[str, Path]:
    """Return the example projects shipped with forge-ml, by name."""
    root = examples_root()
    if root is None:
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if (p / CONFIG_FILE).is_file()}


# The scaffold's system prompt says nothing about the task: training on it works, but the model
# is then trained and served without being told what to do (read_system_prompt warns).
PLACEHOLDER_SYSTEM_PROMPT = "You are a helpful assistant. Answer with the expected output only."

_SCAFFOLD = {
    "mission.md": "# Mission\n\nDescribe the task: what goes in, what must come out, what counts as correct.\n",
    "BACKGROUND.md": "# Background\n\nDomain knowledge the planner and the data generator read in full.\n",
    "system_prompt.md": PLACEHOLDER_SYSTEM_PROMPT + "\n",
    "dataset/seed.jsonl": "",
    "dataset/gold.jsonl": "",
    "dataset/canonical.jsonl": "",
    ".gitignore": "output/\nmlflow.db\nmlartifacts/\n.env\n",
}


def project_name(directory: str) -> str:
    """The project name a directory gives: its name, with what a name may not hold (`/ \\ : @`,
    control characters; it names the MLflow experiment and registered model) and OmegaConf's `${`
    as `-`."""
    name = "".join("-" if c in "/\\:@" or not c.isprintable() else c for c in directory)
    return name.replace("${", "-{").strip() or "project"


def _yaml_name(name: str) -> str:
    """`name` as a YAML string: plain where it can be, quoted where it must (`it's [1]`, `#1`)."""
    import yaml

    return yaml.safe_dump(name, allow_unicode=True, width=1 << 20).removesuffix("\n...\n").strip()


def _scaffold_config(name: str) -> str:
    base = (conf_root() / CONFIG_FILE).read_text(encoding="utf-8")
    body = base.split("defaults:", 1)[1].split("\nname:", 1)[0]
    return (
        f"# {name}: forge-ml project config (Hydra primary config).\n"
        "# Groups come from forge-ml's packaged conf/; override any key here or on the command\n"
        "# line, e.g. `forge-ml train lora.r=16 training.epochs=3`.\n"
        f"defaults:{body}\nname: {_yaml_name(name)}\n"
    )


def init_project(target: Path, *, example: str | None = None) -> Project:
    """Create a project directory at `target`, empty or copied from a packaged example."""
    target = target.expanduser().resolve()
    if target.exists() and any(target.iterdir()):
        raise InputError(f"{target}: already exists and is not empty; choose another name")
    name = project_name(target.name)
    if example is not None:
        examples = packaged_examples()
        if example not in examples:
            known = ", ".join(examples) or "none"
            raise InputError(f"--example {example!r}: unknown example (available: {known})")
        tmp = target.with_name(f".{name}.init-tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(
            examples[example], tmp, ignore=shutil.ignore_patterns("output", "mlflow.db", "__pycache__")
        )
        _rename_project(tmp / CONFIG_FILE, name)
        if target.exists():
            target.rmdir()
        tmp.rename(target)
        return Project(target)
    tmp = target.with_name(f".{name}.init-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for rel, text in _SCAFFOLD.items():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (tmp / CONFIG_FILE).write_text(_scaffold_config(name), encoding="utf-8")
    if target.exists():
        target.rmdir()
    tmp.rename(target)
    return Project(target)


def _rename_project(config_file: Path, name: str) -> None:
    """Set `name:` in forge.yaml, keeping its comments and layout."""
    patch_config(config_file, {"name": name})


def patch_config(config_file: Path, patches: dict[str, Any]) -> None:
    """Set dotted keys in forge.yaml (atomically), keeping its comments, order and layout (ruamel round trip)."""
    import io

    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    from forge_ml.fileio import atomic_write_text

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)  # the `  - group: option` style of forge.yaml
    yaml.representer.add_representer(
        type(None), lambda rep, _: rep.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    try:
        data = yaml.load(config_file.read_text(encoding="utf-8"))
    except Exception as exc:
        raise InputError(f"{config_file}: not valid YAML ({exc})") from None
    for key, value in patches.items():
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = CommentedMap()
            node = node[part]
        node[leaf] = value
    out = io.StringIO()
    yaml.dump(data, out)
    atomic_write_text(config_file, out.getvalue())


def load_project_function(path: Path, name: str, signature: str) -> Any:
    """Import the project's own Python file `path` and return its function `name` (InputError naming the file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"forge_project_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise InputError(f"{path}: failed to import ({describe(exc)})") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise InputError(f"{path}: defines no function {signature}")
    return fn


class ProjectLock:
    """The project's writer lock: one command at a time changes canonical, forge.yaml, the flywheel state or the champion.

    Held as an `fcntl.flock` on `output/flywheel.lock` for as long as the command runs, so the kernel
    releases it when the holder dies (SIGKILL included): taking over a dead owner's lock is the same
    atomic `flock` as taking a free one, and two starters can never both win. The file also names its
    holder (command, pid, host) for the refusal message; a file that names a live process on this
    host is respected even without the flock. Re-entrant within one process (the flywheel's seed
    merge runs under the flywheel's own lock).
    """

    _held: dict[tuple[int, Path], int] = {}  # (pid, lock path) -> depth: a forked child holds nothing

    def __init__(self, project: Project, command: str = "flywheel") -> None:
        self.path = project.output / LOCK
        self.command = command
        self.recovered = False  # took over the lock of a process that is gone
        self.recovered_from: int | None = None  # its pid, when the lock names one
        self._fd: int | None = None

    def __enter__(self) -> ProjectLock:
        key = (os.getpid(), self.path.resolve())
        if key in ProjectLock._held:
            ProjectLock._held[key] += 1
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(20):  # another process may unlink the file between our open and our flock
            try:
                fd, existed = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644), False
            except FileExistsError:
                try:
                    fd, existed = os.open(self.path, os.O_RDWR), True
                except FileNotFoundError:
                    continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self._refuse(self._owner())
            if not self._same_file(fd):  # its holder released and removed it: start over
                os.close(fd)
                continue
            owner = self._owner()
            if owner and self._alive_elsewhere(owner):
                os.close(fd)
                self._refuse(owner)
            if existed:  # an unlocked lock file: its holder died without removing it
                self.recovered, self.recovered_from = True, owner.get("pid")
            self._claim(fd)
            ProjectLock._held[key] = 1
            return self
        raise InputError(f"{self.path}: could not take the project lock (it kept changing hands)")

    def __exit__(self, *exc: object) -> None:
        key = (os.getpid(), self.path.resolve())
        depth = ProjectLock._held.get(key, 0)
        if depth > 1:
            ProjectLock._held[key] = depth - 1
            return
        ProjectLock._held.pop(key, None)
        if self._fd is None:
            return
        try:
            if self._same_file(self._fd):
                self.path.unlink(missing_ok=True)  # while still holding the flock (see _same_file)
        finally:
            os.close(self._fd)
            self._fd = None

    def _claim(self, fd: int) -> None:
        data = {
            "command": self.command,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.time(),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(data).encode(), 0)
        self._fd = fd

    def _same_file(self, fd: int) -> bool:
        """Whether the path still names the file `fd` holds (a released lock is unlinked before its flock goes)."""
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    @staticmethod
    def _alive_elsewhere(owner: dict[str, Any]) -> bool:
        """A lock naming a live process on this host other than us (its holder does not use flock)."""
        pid = owner.get("pid")
        return (
            owner.get("host") == socket.gethostname()
            and isinstance(pid, int)
            and pid != os.getpid()
            and pid_alive(pid)
        )

    def _refuse(self, owner: dict[str, Any]) -> None:
        command = owner.get("command", "flywheel")
        raise InputError(
            f"{self.path}: another forge-ml {command} (pid {owner.get('pid')} on {owner.get('host')}) "
            "is running on this project; wait for it, or remove the lock if that process is gone"
        ) from None

    def _owner(self) -> dict[str, Any]:
        try:
            return json.loads(Path(self.path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return {}
