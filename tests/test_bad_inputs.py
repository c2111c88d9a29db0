"""The bad-input corpus (tests/bad_inputs/*.yaml, described in its README.md) run through the CLI.

Each case breaks a fresh drone-router project (the `small_project` fixture) with its edits,
runs one `forge-ml` command and checks the project's rule: the exit code it expects (1 for
bad input, 2 for a runtime fault), a message naming the file, key or line, no traceback, and
nothing lost or half-written: every file of the project before the command is still there,
byte for byte, and the only new files are what a command may always create (`output/`, the
MLflow store, Python's `__pycache__/`), never a `*.tmp` left behind.

The CLI runs in this process through its entry point `forge_ml.cli.main` (the console
script's target), which keeps the corpus fast; FORGE_BAD_INPUTS_SUBPROCESS=1 runs every case
through the installed `forge-ml` script instead, to check that both agree.
"""

from __future__ import annotations

import logging
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import edit_config, run_cli
from reliability import BAD_INPUT_CLASSES

pytestmark = pytest.mark.reliability

CASES_DIR = Path(__file__).parent / "bad_inputs"
CASES = sorted(CASES_DIR.glob("*.yaml"))
CLASSES = BAD_INPUT_CLASSES
CASE_KEYS = {"description", "class", "edits", "args", "expect", "xfail"}
TEXT_OPS = ("write", "append", "prepend", "replace")
MAY_APPEAR = ("output", "mlartifacts", "__pycache__")  # first path part of files a command may create
MLFLOW_STORE = re.compile(r"mlflow\.db(-journal|-wal|-shm)?$")
SUBPROCESS = os.environ.get("FORGE_BAD_INPUTS_SUBPROCESS") == "1"


def load_case(path: Path) -> dict[str, Any]:
    case = yaml.safe_load(path.read_text(encoding="utf-8"))
    unknown = set(case) - CASE_KEYS
    assert not unknown, f"{path.name}: unknown keys {sorted(unknown)}"
    assert case["class"] in CLASSES, f"{path.name}: class {case['class']!r} is not one of {CLASSES}"
    assert case["description"].strip() and "\n" not in case["description"].strip(), path.name
    assert isinstance(case["args"], list) and case["args"], f"{path.name}: args must be a non-empty list"
    assert set(case["expect"]) == {"exit", "message"}, f"{path.name}: expect needs exit and message"
    return case


def _payload(edit: dict[str, Any], op: str) -> bytes:
    text = edit[op]
    if "fill" in edit:
        assert "@FILL@" in text, f"fill without @FILL@ in {edit}"
        text = text.replace("@FILL@", "x" * int(edit["fill"]))
    return text.encode("latin-1" if edit.get("bytes") else "utf-8")


def apply_edit(project: Any, edit: dict[str, Any]) -> None:
    """One edit of a case (see tests/bad_inputs/README.md)."""
    if "set" in edit:
        keys = edit["set"] if isinstance(edit["set"], list) else edit["set"].split(".")
        edit_config(project, *keys, edit["value"])
        return
    path = project.root / edit["path"]
    ops = [op for op in TEXT_OPS if op in edit]
    assert len(ops) == 1, f"an edit needs exactly one of set, {', '.join(TEXT_OPS)}: {edit}"
    op, data = ops[0], _payload(edit, ops[0])
    if op == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    elif op == "append":
        path.write_bytes(path.read_bytes() + data)
    elif op == "prepend":
        path.write_bytes(data + path.read_bytes())
    else:
        lines = path.read_bytes().split(b"\n")
        number = int(edit["line"])
        assert 1 <= number <= len(lines), f"{edit['path']} has no line {number}"
        lines[number - 1] = data
        path.write_bytes(b"\n".join(lines))


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def may_appear(name: str) -> bool:
    return Path(name).parts[0] in MAY_APPEAR or bool(MLFLOW_STORE.fullmatch(name))


@contextmanager
def kept_logging():
    """Put the root logger back as it was: `train` runs Hydra, which installs its own handlers."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in ("forge_ml", "hydra")}
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
        for name, value in levels.items():
            logging.getLogger(name).setLevel(value)


def run_forge(argv: list[str], capsys, monkeypatch) -> tuple[int, str]:
    """Run `forge-ml ARGV`; return (exit code, stderr)."""
    if SUBPROCESS:
        result = run_cli(*argv, env={"ANTHROPIC_API_KEY": ""})
        return result.returncode, result.stderr
    from forge_ml.cli import QUIET_ENV, main

    for name, value in {**QUIET_ENV, "NO_COLOR": "1", "COLUMNS": "200"}.items():
        monkeypatch.setenv(name, value)  # main() sets QUIET_ENV; monkeypatch undoes it afterwards
    capsys.readouterr()
    with kept_logging():
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse refuses before main() returns
            code = exc.code if isinstance(exc.code, int) else 1
    return code, capsys.readouterr().err


def _params():
    for path in CASES:
        case = load_case(path)
        marks = [pytest.mark.xfail(reason=case["xfail"], strict=True)] if case.get("xfail") else []
        yield pytest.param(path, id=path.stem, marks=marks)


def test_the_corpus_covers_every_class():
    found = {load_case(path)["class"] for path in CASES}
    assert found == set(CLASSES), f"classes without a case: {sorted(set(CLASSES) - found)}"


@pytest.mark.parametrize("case_file", list(_params()))
def test_bad_input_is_refused_naming_it_and_changes_nothing(
    case_file, small_project, tmp_path, capsys, monkeypatch, proof
):
    case = load_case(case_file)
    root = small_project.root
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # offline: generator.py writes, no Claude
    monkeypatch.chdir(tmp_path)
    for edit in case["edits"]:
        apply_edit(small_project, edit)
    before = snapshot(root)

    code, stderr = run_forge(["-p", str(root), *(str(a) for a in case["args"])], capsys, monkeypatch)

    flat = stderr.replace("\r", "").replace("\n", "")  # rich may wrap a long message
    fragment = case["expect"]["message"].replace("{project}", str(root))
    assert code == case["expect"]["exit"], f"exit {code}, stderr:\n{stderr}"
    assert fragment in flat, f"{fragment!r} not in stderr:\n{stderr}"
    assert "Traceback" not in stderr, stderr
    after = snapshot(root)
    lost = [name for name in before if name not in after]
    changed = [name for name in before if name in after and after[name] != before[name]]
    unexpected = [name for name in after if name not in before and not may_appear(name)]
    leftovers = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.tmp")]
    assert not lost, f"files lost: {lost}"
    assert not changed, f"files changed: {changed}"
    assert not unexpected, f"files a refused command must not create: {unexpected}"
    assert not leftovers, f"temporary files left: {leftovers}"
    shown = fragment.replace(str(root), "<project>")
    proof(
        case["class"],
        case["description"].strip(),
        f"`forge-ml {' '.join(map(str, case['args']))}` refused with exit {code}: …{shown}…; "
        f"{len(before)} project files unchanged",
    )
