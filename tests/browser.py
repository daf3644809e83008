"""Headless Chromium for the explorer's tests: Debian's chromium and chromium-driver, driven by selenium.

Where they are missing they are installed with apt-get as root (CI does so, as it installs slurm-wlm);
elsewhere the test skips with the reason. Nothing is downloaded by selenium: the driver's path is given.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess

import pytest

PACKAGES = ("chromium", "chromium-driver")
APT_LOCK = "/tmp/forgetmap-apt.lock"  # shared with tests/cluster/slurm-up.sh


def _found() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def chromium():
    """A headless Chromium WebDriver that keeps the page's console log, or pytest.skip with the reason."""
    pytest.importorskip("selenium", reason="selenium drives the browser: pip install -e '.[dev]'")
    found = _found()
    if found is None:
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            pytest.skip("no chromium + chromedriver here, and installing them needs root and apt-get (CI has both)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        with open(APT_LOCK, "w") as lock:  # one apt-get at a time: the other test process may install SLURM
            fcntl.flock(lock, fcntl.LOCK_EX)
            found = _found()  # the other process may have installed it meanwhile
            if found is None:
                subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True, env=env, timeout=600)
                done = subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES], capture_output=True, text=True,
                                      env=env, timeout=900)
                found = _found()
                if done.returncode != 0 or found is None:
                    pytest.skip(f"apt-get could not install {' '.join(PACKAGES)}: {done.stderr[-500:]}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=found[1]), options=options)


def wait_ready(driver, timeout: float = 60.0) -> float:
    """Seconds until the page says it has drawn everything (`document.body.dataset.ready`)."""
    import time

    from selenium.webdriver.support.ui import WebDriverWait

    start = time.perf_counter()
    WebDriverWait(driver, timeout).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
    return time.perf_counter() - start


def console_errors(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def remote_requests(driver) -> list[str]:
    """The URLs the page asked for beyond the file itself (what an offline page must not need)."""
    import json

    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if not url.startswith(("file:", "data:", "blob:", "about:")):
                urls.append(url)
    return urls
