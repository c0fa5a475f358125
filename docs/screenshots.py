"""README screenshots: Airflow standalone with this project's DAGs, in headless Chromium.

    .venv/bin/pip install -e '.[docs]' && apt-get install chromium
    .venv/bin/python docs/screenshots.py

Starts the local clusters and `airflow standalone` (SQLite, a throw-away AIRFLOW_HOME),
fills the demo topic, runs the demo flow's DAG once, then takes the pictures into
docs/img/: the DAG's graph, the trigger form, the status view, the run's Data Docs.
Chromium is Debian's (/usr/bin/chromium); Playwright only drives it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CONFIG = REPO / "include" / "config" / "mm2.properties"
DAG_ID = "mirror__primary__backup"
IMG = REPO / "docs" / "img"
URL = "http://127.0.0.1:8080"
# GX Data Docs load Bootstrap, jQuery and Font Awesome from CDNs, which this machine cannot
# reach (offline the page renders unstyled). For the picture, serve the same releases from
# the npm registry (`npm pack`); every other remote request is dropped.
CDN_FROM_NPM = [
    (r"https://maxcdn\.bootstrapcdn\.com/bootstrap/4\.3\.1/(.*)", "bootstrap@4.3.1", "dist/{}"),
    (r"https://stackpath\.bootstrapcdn\.com/bootstrap/4\.3\.1/(.*)", "bootstrap@4.3.1",
     "dist/{}"),
    (r"https://code\.jquery\.com/jquery-3\.7\.1\.min\.js", "jquery@3.7.1",
     "dist/jquery.min.js"),
    (r"https://unpkg\.com/bootstrap-table@1\.19\.\d/(.*)", "bootstrap-table@1.19.1", "{}"),
    (r"https://cdnjs\.cloudflare\.com/ajax/libs/popper\.js/1\.12\.9/(.*)", "popper.js@1.12.9",
     "dist/{}"),
    (r"https://cdnjs\.cloudflare\.com/ajax/libs/font-awesome/6\.6\.0/(.*)",
     "@fortawesome/fontawesome-free@6.6.0", "{}"),
]


def wait_for(what: str, check, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(2)
    raise TimeoutError(f"{what} not ready within {timeout:.0f}s")


def airflow(env: dict, *args: str) -> str:
    return subprocess.run([str(BIN / "airflow"), *args], env=env, check=True,
                          capture_output=True, text=True).stdout


def succeeded(env: dict) -> int:
    return airflow(env, "dags", "list-runs", DAG_ID, "-o", "plain").count("success")


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="mirrorflow-screens-"))
    env = {**os.environ, "AIRFLOW_HOME": str(home),
           "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
           "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
           "AIRFLOW__API__BASE_URL": URL,
           "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
           "MIRRORFLOW_CONFIG": str(CONFIG), "MIRRORFLOW_REPORTS_DIR": str(home / "reports"),
           "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYSPARK_PYTHON": sys.executable}
    subprocess.run([str(BIN / "mirrorflow"), "demo", str(CONFIG), "--records", "3000"],
                   env=env, check=True, capture_output=True)
    airflow(env, "db", "migrate")
    airflow(env, "pools", "set", "mirrorflow_spark", "2", "Spark jobs of mirrorflow")
    with open(home / "standalone.log", "w") as log:
        server = subprocess.Popen([str(BIN / "airflow"), "standalone"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for("the API server",
                 lambda: urllib.request.urlopen(f"{URL}/api/v2/monitor/health").status == 200)
        wait_for("the DAG", lambda: DAG_ID in airflow(env, "dags", "list", "-o", "plain"))
        airflow(env, "dags", "unpause", DAG_ID)
        airflow(env, "dags", "trigger", DAG_ID)
        wait_for("the DAG run", lambda: succeeded(env) >= 1, timeout=300)
        # More data, mirrored in capped runs, so the status view's lag chart has a shape.
        subprocess.run([str(BIN / "mirrorflow"), "demo", str(CONFIG), "--records", "3000"],
                       env=env, check=True, capture_output=True)
        for runs in (2, 3):
            airflow(env, "dags", "trigger", DAG_ID, "--conf",
                    json.dumps({"max_records_per_partition": 600}))
            wait_for(f"DAG run {runs}", lambda n=runs: succeeded(env) >= n, timeout=300)
        take_pictures(home / "reports")
    finally:
        os.killpg(server.pid, 15)
        server.wait(30)
        subprocess.run([str(BIN / "mirrorflow"), "local", "down", str(CONFIG)], env=env,
                       check=False, capture_output=True)
    return 0


def serve_cdn_from_npm(page, cache: Path) -> None:
    cache.mkdir(parents=True, exist_ok=True)

    def handle(route) -> None:
        url = route.request.url
        for pattern, package, template in CDN_FROM_NPM:
            found = re.fullmatch(pattern, url)
            if not found:
                continue
            tgz = cache / (package.lstrip("@").replace("/", "-").replace("@", "-") + ".tgz")
            if not tgz.exists():
                subprocess.run(["npm", "pack", package], cwd=cache, check=True,
                               capture_output=True)
            member = "package/" + template.format(*found.groups())
            with tarfile.open(tgz) as archive:
                body = archive.extractfile(member).read()
            kind = "text/css" if member.endswith(".css") else (
                "application/javascript" if member.endswith(".js") else "font/woff2")
            route.fulfill(body=body, content_type=kind)
            return
        route.abort()

    page.route(re.compile(r"https://.*"), handle)


def take_pictures(reports: Path) -> None:
    from playwright.sync_api import sync_playwright

    IMG.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(f"{URL}/dags/{DAG_ID}")
        page.get_by_label("Show Graph (Press g)").click()
        page.wait_for_load_state("networkidle")
        page.get_by_text("commit_and_sync_offsets").first.wait_for()
        page.wait_for_timeout(3000)  # the graph lays itself out after the data arrives
        page.screenshot(path=str(IMG / "dag-graph.png"))
        page.get_by_test_id("trigger-dag-button").click()
        page.get_by_role("dialog").wait_for()
        page.wait_for_timeout(1500)
        page.screenshot(path=str(IMG / "trigger-form.png"))
        page.keyboard.press("Escape")
        # The plugin's status view, inside the Airflow UI (Browse -> Replication).
        page.goto(f"{URL}/plugin/mirrorflow")
        page.frame_locator("iframe").get_by_text("replication status").wait_for()
        page.wait_for_timeout(1500)
        page.screenshot(path=str(IMG / "status.png"))
        # The completeness suite's result page of the run, from its Data Docs.
        result = next(reports.glob("*/*/validations/mirrorflow/completeness/*/*/*.html"))
        page.set_viewport_size({"width": 1400, "height": 1100})
        serve_cdn_from_npm(page, Path.home() / ".cache" / "mirrorflow-docs-cdn")
        page.goto(result.as_uri())
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(IMG / "data-docs.png"))
        browser.close()


if __name__ == "__main__":
    sys.exit(main())
