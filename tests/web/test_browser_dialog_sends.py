"""What the Train Model page sends, in a real headless Chromium: a server started in an empty
folder offers the packaged recipes, and a submission carries only the fields the user
changed (the batch), so the run's learning rate scales as `trainforge train --batch_size`
scales it. The POST is caught before it reaches the server: nothing trains."""

from __future__ import annotations

import json

import pytest
from tests.web.test_browser import chromium

from fakes.web import CPU, serving

pytestmark = pytest.mark.browser


def test_the_page_sends_only_what_the_user_changed(tmp_path):
    from playwright.sync_api import expect, sync_playwright

    sent: list[dict] = []

    def catch(route) -> None:
        sent.append(json.loads(route.request.post_data))
        route.fulfill(status=422, json={"detail": [], "errors": {"_form": ["caught"]}})

    with serving(tmp_path, CPU) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True)
        page = browser.new_page()
        page.set_default_timeout(30_000)
        page.route("**/api/runs", catch)
        page.goto(f"{url}/runs")
        page.get_by_role("button", name="Train Model").click()
        expect(page.locator("#f-config")).to_have_value("vit_digits")  # a recipe, by name
        expect(page.locator("#f-learning_rate")).to_have_value("0.002")
        page.locator("#f-batch_size").fill("128")
        page.get_by_role("button", name="Start Training").click()
        expect(page.locator('.error[data-for="_form"]')).to_have_text("caught")
        browser.close()
    (body,) = sent
    assert body["config"] == "vit_digits" and body["batch_size"] == 128
    assert body["learning_rate"] is None and body["epochs"] is None and body["dataset"] is None
