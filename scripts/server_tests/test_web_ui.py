#!/usr/bin/env python3
"""Headless-browser test of the `ferrolm serve` web page (GET /).

Drives Debian's Chromium through chromedriver (selenium), sends one chat message and checks that:
  * the assistant reply finishes (`data-done="true"`) with non-empty text within the timeout,
  * the reply streamed in: its text was seen with at least two distinct non-empty lengths
    (greedy by default, with a message whose reply is dozens of tokens long, so that the check
    does not hinge on a sampled two-token answer finishing between two polls),
  * the reply is not an error message,
  * the metrics panel shows a numeric `#metric-slots-total` >= 1.

Needs: `pip install selenium` and `bash scripts/server_tests/install_chromium.sh`.
Usage: test_web_ui.py --base-url http://127.0.0.1:8080 [--screenshot out.png] [--api-key KEY]
Exits non-zero with a message on the first failed check.
"""

import argparse
import os
import sys
import time
import urllib.error
import urllib.request

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class CheckFailed(Exception):
    """A check on the page failed."""


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", required=True, help="server root, e.g. http://127.0.0.1:8080")
    p.add_argument("--screenshot", help="save a PNG screenshot of the page here at the end")
    p.add_argument("--api-key", help="API key to put into the page's settings before sending")
    p.add_argument("--message", default="Write four sentences about the sea.", help="chat message to send")
    p.add_argument("--temperature", default="0",
                   help="temperature to put into the page's settings before sending (default 0: greedy)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the reply (default 60)")
    return p.parse_args()


def make_driver():
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            raise CheckFailed(f"{path} is missing: run scripts/server_tests/install_chromium.sh")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        raise CheckFailed(f"selenium is not installed ({e}): pip install selenium") from e
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--disable-extensions", "--no-first-run"):
        opts.add_argument(arg)
    # An explicit driver path keeps selenium-manager from trying to download anything.
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)


def find(driver, css):
    from selenium.webdriver.common.by import By

    elems = driver.find_elements(By.CSS_SELECTOR, css)
    if not elems:
        raise CheckFailed(f"page has no element matching {css!r}")
    return elems[0]


def wait_for_reply(driver, timeout):
    """Polls the last assistant message until it is done; returns (text, distinct non-empty lengths)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    lengths = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msgs = driver.find_elements(By.CSS_SELECTOR, "#messages .msg.assistant")
            if msgs:
                last = msgs[-1]
                # Read text and state in one script call so they belong to the same moment.
                text, done, error = driver.execute_script(
                    "const b = arguments[0].querySelector('.body') || arguments[0];"
                    "return [b.textContent, arguments[0].dataset.done, arguments[0].dataset.error];",
                    last,
                )
                if text and (not lengths or lengths[-1] != len(text)):
                    lengths.append(len(text))
                if done == "true":
                    if error == "true":
                        raise CheckFailed(f"assistant reply ended in an error: {text!r}")
                    if not text.strip():
                        raise CheckFailed("assistant reply finished with empty text")
                    return text, lengths
        except StaleElementReferenceException:
            pass
        time.sleep(0.02)
    raise CheckFailed(f"no finished assistant reply within {timeout:.0f} s (text lengths seen: {lengths})")


def wait_for_slots_total(driver, timeout):
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        shown = find(driver, "#metric-slots-total").text.strip()
        try:
            value = float(shown.replace(",", ""))
        except ValueError:
            value = None
        if value is not None:
            if value < 1:
                raise CheckFailed(f"#metric-slots-total shows {shown!r}, expected >= 1")
            return value
        time.sleep(0.2)
    conn = find(driver, "#conn").text
    raise CheckFailed(f"#metric-slots-total is not numeric after {timeout:.0f} s: {shown!r} (status: {conn!r})")


def set_setting(driver, css, value):
    """Types `value` into a settings field and fires `change`, as a user leaving the field does."""
    field = find(driver, css)
    field.clear()
    field.send_keys(value)
    driver.execute_script("arguments[0].dispatchEvent(new Event('change'))", field)


def check_reachable(base):
    """Fails early with a plain message when the server is down or `/` is not the page."""
    try:
        with urllib.request.urlopen(base + "/", timeout=10) as r:
            ctype = r.headers.get("Content-Type", "")
    except (urllib.error.URLError, OSError) as e:
        raise CheckFailed(f"cannot load {base}/: {e}") from e
    if "text/html" not in ctype:
        raise CheckFailed(f"{base}/ answered Content-Type {ctype!r}, expected text/html")


def run(args):
    base = args.base_url.rstrip("/")
    check_reachable(base)
    driver = make_driver()
    try:
        driver.get(base + "/")
        prompt = find(driver, "#prompt")
        find(driver, "#stop")
        find(driver, "#messages")
        if args.api_key:
            set_setting(driver, "#api-key", args.api_key)

        set_setting(driver, "#temperature", args.temperature)
        prompt.send_keys(args.message)
        find(driver, "#send").click()
        text, lengths = wait_for_reply(driver, args.timeout)
        print(f"reply ({len(text)} chars, {len(lengths)} distinct lengths while streaming): {text[:200]!r}")
        if len(lengths) < 2:
            raise CheckFailed(
                f"reply did not stream: its text was seen with lengths {lengths} (need >= 2 distinct)"
            )
        meta = driver.execute_script(
            "const m = document.querySelectorAll('#messages .msg.assistant .meta');"
            "return m.length ? m[m.length - 1].textContent : '';"
        )
        print(f"usage line: {meta!r}")

        slots_total = wait_for_slots_total(driver, 10.0)
        print(f"metrics: slots total {slots_total:g}, generation tok/s {find(driver, '#metric-gen-tps').text!r}")
    finally:
        # Also on failure: the screenshot shows what the page looked like when the check failed.
        if args.screenshot:
            if driver.save_screenshot(args.screenshot):
                print(f"screenshot: {args.screenshot}")
            else:
                print(f"warning: could not save screenshot to {args.screenshot}", file=sys.stderr)
        driver.quit()


def main():
    args = parse_args()
    try:
        run(args)
    except CheckFailed as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # selenium/webdriver errors: report them clearly, not as a bare traceback
        msg = (getattr(e, "msg", None) or str(e)).strip().splitlines()
        print(f"FAIL: {type(e).__name__}: {msg[0] if msg else ''}", file=sys.stderr)
        return 1
    print("PASS: web UI streamed a reply and shows metrics")
    return 0


if __name__ == "__main__":
    sys.exit(main())
