"""Regenerate the MLflow UI screenshots of the README (docs/ui/*.png) from a demo project.

    .venv/bin/python scripts/ui_screenshots.py            # builds ui-demo/ with `make demo` when missing

Needs Debian's `chromium` and `chromium-driver` packages (`apt-get install chromium
chromium-driver`) and `selenium` in the virtual environment (`.venv/bin/pip install selenium`).
The project is built by the README's own `make demo` (the drone-router example, 3 offline rounds,
tiny model on a CPU), then `forge-ml ui` serves its store on loopback and headless Chromium
photographs: the runs table with the rounds and their nested trials, the chart of gold accuracy
per round, the registered model's page (description, versions, champion) and a version's page.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import closing, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
# The closed network refuses Chromium's background connections, many at a time: switch them off.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1600,1200",
)


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_demo(project: Path) -> None:
    """The README's demo, into `project` (it resumes, or only prints the status, when already there)."""
    done = subprocess.run(["make", "-C", str(ROOT), "demo", f"DEMO_DIR={project}"], check=False)
    if done.returncode:
        sys.exit(f"make demo failed (exit {done.returncode})")


@contextmanager
def mlflow_ui(project: Path, port: int):
    forge = Path(sys.executable).with_name("forge-ml")
    server = subprocess.Popen(
        [str(forge), "-p", str(project), "ui", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("the MLflow UI did not start")
            time.sleep(1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


def api(base: str, path: str, **query: str) -> dict:
    from urllib.parse import urlencode

    with urllib.request.urlopen(f"{base}/api/2.0/mlflow/{path}?{urlencode(query)}", timeout=30) as reply:
        return json.loads(reply.read())


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def wait_for_text(driver, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in driver.find_element("tag name", "body").text:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{text!r} never appeared on {driver.current_url}")
        time.sleep(0.5)
    time.sleep(2)  # let charts and images finish drawing


def click_all(driver, selector: str) -> int:
    """Click every element matching `selector` once, re-reading the page after each click; return how many."""
    clicked = 0
    while clicked < 50:
        found = driver.find_elements("css selector", selector)
        if len(found) <= clicked:
            return clicked
        try:
            found[clicked].click()
        except Exception:  # out of view or covered: leave it
            pass
        clicked += 1
        time.sleep(0.5)
    return clicked


def tidy(driver) -> None:
    """Close the assistant side panel and switch the navigation to model training (not GenAI)."""
    click_all(driver, "button[data-component-id='mlflow.assistant.chat_panel.close']")
    for toggle in driver.find_elements("xpath", "//*[normalize-space(text())='Model training']"):
        try:
            toggle.click()
        except Exception:
            continue
    time.sleep(1)


def shoot(driver, url: str, text: str, out: Path, prepare=None) -> None:
    driver.get(url)
    wait_for_text(driver, text)
    tidy(driver)
    if prepare is not None:
        prepare(driver)
    driver.save_screenshot(str(out))
    print(f"{out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}  <- {url}")


def expand_rounds(driver) -> None:
    """Open every round's nested trials in the runs table (the expander left of a parent run's name)."""
    click_all(driver, "button[data-component-id$='runnamecellrenderer.tsx_46']")
    time.sleep(2)


def gold_chart_only(driver) -> None:
    """Keep the charts of gold accuracy: type it into the chart search box."""
    (box,) = driver.find_elements("css selector", "input[placeholder='Search metric charts']")[:1]
    box.send_keys("gold/accuracy")
    time.sleep(3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--project", type=Path, default=ROOT / "ui-demo", help="demo project (built when missing)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui")
    opts = parser.parse_args(argv)
    for needed in (CHROMIUM, CHROMEDRIVER):
        if not needed.exists():
            sys.exit(f"{needed} is missing: apt-get install chromium chromium-driver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        sys.exit(f"selenium is missing: {Path(sys.executable).with_name('pip')} install selenium")

    project = opts.project.resolve()
    build_demo(project)
    opts.out.mkdir(parents=True, exist_ok=True)
    import yaml

    name = yaml.safe_load(project.joinpath("forge.yaml").read_text(encoding="utf-8"))["name"]
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    with mlflow_ui(project, free_port()) as base:
        experiment = api(base, "experiments/get-by-name", experiment_name=name)["experiment"]["experiment_id"]
        model = api(base, "registered-models/get", name=name)["registered_model"]
        champion = next(a["version"] for a in model.get("aliases", []) if a["alias"] == "champion")
        driver = browser()
        try:
            runs = f"{base}/#/experiments/{experiment}/runs"
            shoot(driver, runs, "round-001", opts.out / "runs.png", expand_rounds)
            shoot(
                driver,
                f"{runs}?compareRunsMode=CHART&searchFilter=tags.%60forge.kind%60%3D%27round%27",
                "gold/accuracy",
                opts.out / "gold_accuracy_chart.png",
                gold_chart_only,
            )
            shoot(driver, f"{base}/#/models/{name}", "champion", opts.out / "registry.png")
            shoot(
                driver,
                f"{base}/#/models/{name}/versions/{champion}",
                "round",
                opts.out / "champion_version.png",
            )
        finally:
            driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
