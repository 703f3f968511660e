"""Driving the Airflow UI like a person: Debian's chromium (``make browser`` installs it; never
a Playwright browser download) through Playwright's sync API.

``browser_page()`` launches chromium, yields a page and always closes the browser (its process
with it), saving a screenshot to ``.cache/test-artifacts/ui/`` when the block fails. The
other helpers find the UI's elements by what a person sees: roles, button names, field labels.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tools.airflow_stack import Stack

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / ".cache" / "test-artifacts" / "ui"
# Tall enough for the whole kafka_adhoc trigger form (the dialog scrolls inside itself).
VIEWPORT = {"width": 1280, "height": 1400}
TIMEOUT_MS = 30_000


def chromium_executable() -> str:
    """The system chromium: ``$CHROMIUM`` if set, else ``chromium`` on the PATH."""
    path = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if not path:
        raise RuntimeError("no `chromium` on the PATH: run `make browser` (installs Debian's "
                           "chromium with apt-get) or set CHROMIUM to a Chromium executable.")
    return path


def screenshot(target: Any, name: str) -> Path:
    """Save a page, or one element such as a dialog, as ``ARTIFACTS/<name>.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    target.screenshot(path=str(path))
    return path


@contextmanager
def browser_page(name: str) -> Iterator[Any]:
    """A fresh chromium page; on an exception in the block, ``ARTIFACTS/<name>-failure.png``
    (and the exception goes on). The browser is closed in every case."""
    from playwright.sync_api import sync_playwright

    (ARTIFACTS / f"{name}-failure.png").unlink(missing_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_executable())
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(TIMEOUT_MS)
            try:
                yield page
            except BaseException:
                screenshot(page, f"{name}-failure")
                raise
        finally:
            browser.close()


def log_in(page: Any, stack: Stack) -> None:
    """Sign in on the simple auth manager's login page with the stack's user and password."""
    page.goto(stack.url)
    page.get_by_label("Username").fill(stack.username)
    page.get_by_label("Password").fill(stack.password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{stack.url}/")


def open_trigger_form(page: Any, stack: Stack, dag_id: str) -> Any:
    """Open the DAG's page, click Trigger; the form's dialog once its Params are rendered."""
    page.goto(f"{stack.url}/dags/{dag_id}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Run Parameters").wait_for()
    return dialog


def form_field(dialog: Any, title: str) -> Any:
    """The input of the form row labelled ``title`` (a Param's title; ``*`` marks required)."""
    # `has` is relative to the group: build the label locator from the page.
    label = dialog.page.locator("label").filter(
        has_text=re.compile(r"^\s*" + re.escape(title) + r"\s*\*?\s*$"))
    return dialog.get_by_role("group").filter(has=label).locator("input")


def type_into(field: Any, text: str, attempts: int = 3) -> None:
    """Click the field, select what it holds and type ``text`` key by key, as a person does,
    then read the field back. On a loaded machine the UI's controlled inputs can drop a
    keystroke that arrives while React re-renders (seen in CI: "rom" for "from"); a person
    would see it and retype, and so does this, ``attempts`` times at most."""
    for _ in range(attempts):
        field.click()
        field.press("ControlOrMeta+a")
        field.press("Backspace")
        field.press_sequentially(text, delay=10)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if field.input_value() == text:
                return
            time.sleep(0.1)
    raise AssertionError(f"the field holds {field.input_value()!r} after typing {text!r} "
                         f"{attempts} times")


class Timer:
    """Wall-clock time of each step, for the test's report."""

    def __init__(self) -> None:
        self.start = self.last = time.monotonic()
        self.steps: dict[str, float] = {}

    def step(self, name: str) -> None:
        now = time.monotonic()
        self.steps[name] = round(now - self.last, 1)
        self.last = now

    def report(self) -> str:
        return ", ".join(f"{k} {v}s" for k, v in self.steps.items()) + \
            f"; total {time.monotonic() - self.start:.1f}s"
