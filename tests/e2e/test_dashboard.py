"""The web dashboard in headless Chromium (Debian's /usr/bin/chromium driven by Playwright):
a submitted job appears, runs and completes; one of its GPUs changes state; a screenshot is
saved to artifacts/dashboard.png. Needs scripts/install-browser.sh (CI runs it)."""

import os
import pathlib
import time

import pytest

from api_helpers import call, restd_info, token

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def _need_browser():
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        why = "playwright is not installed (run scripts/install-browser.sh)"
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)
    if not os.access(CHROMIUM, os.X_OK):
        why = f"{CHROMIUM} missing (run scripts/install-browser.sh)"
        pytest.fail(why) if os.environ.get("CI") else pytest.skip(why)


def wait_js(page, expr, timeout=30.0, what=""):
    deadline = time.monotonic() + timeout
    while True:
        v = page.evaluate(expr)
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or expr}")
        time.sleep(0.1)


def test_dashboard_follows_a_job_and_its_gpus(cluster, workdir, test_user):
    _need_browser()
    from playwright.sync_api import sync_playwright
    tok = token(cluster, user=test_user)
    url = restd_info(cluster)["dashboard"]
    art = ROOT / "artifacts"
    art.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url + "#token=" + tok)
            page.wait_for_selector("#main:not([hidden])", timeout=15000)
            assert page.text_content("#user-name").startswith(test_user)
            wait_js(page, "window.muster.snap !== null", what="first snapshot")

            s, b = call(cluster, "POST", "/slurm/v0.0.40/job/submit", tok, {
                "script": "#!/bin/sh\necho dashboard test on $(hostname)\nsleep 5\necho done\n",
                "job": {"name": "dash-job", "current_working_directory": workdir,
                        "tres_per_node": "gres/gpu:2"}})
            assert s == 200, b
            jid = b["job_id"]
            row = f".row[data-job-id='{jid}']"
            # the job appears in the queue ...
            page.wait_for_selector(row, timeout=15000)
            # ... runs, and two GPUs show it as their owner on the cluster map
            page.wait_for_selector(f"{row}[data-state='RUNNING']", timeout=30000)
            gpu = wait_js(page, f"""(() => {{ const n = window.muster.snap.nodes;
                for (let i = 0; i < n.name.length; i++) {{ const g = n.gpu_owner[i].indexOf({jid});
                  if (g >= 0) return [n.name[i], g]; }} return null; }})()""", what="GPU owned by job")
            node, idx = gpu
            assert page.evaluate(f"window.muster.gpuState('{node}', {idx})") == f"alloc:{jid}"
            page.click(row)
            page.wait_for_selector("#detail-events", timeout=10000)
            page.screenshot(path=str(art / "dashboard-running.png"), full_page=True)
            # ... completes; its GPU goes back to idle (or to another job)
            page.wait_for_selector(f"{row}[data-state='COMPLETED']", timeout=60000)
            wait_js(page, f"window.muster.gpuState('{node}', {idx}) !== 'alloc:{jid}'",
                    what="GPU released")
            # the detail panel (refreshed for the finished job) shows exit code and output
            page.click(row)
            page.wait_for_function("document.querySelector('#detail-state') && "
                                   "document.querySelector('#detail-state').textContent === 'COMPLETED'",
                                   timeout=15000)
            page.wait_for_selector("#detail-output", timeout=10000)
            out = page.text_content("#detail-output")
            assert "dashboard test on" in out and "done" in out
            assert "ended" in page.text_content("#detail-events")
            page.screenshot(path=str(art / "dashboard.png"), full_page=True)
            assert not errors, errors
        finally:
            browser.close()
    assert (art / "dashboard.png").stat().st_size > 10000
