#!/usr/bin/env python3
"""End-to-end test of the demo page: serves web/ (after web/build.sh), opens it in headless
Chromium with WebGPU through chromedriver (the W3C WebDriver protocol, Python stdlib only),
waits for the result marker #result[data-status], asserts that the correctness check passed,
that the live training lowered the loss (window.trainReport), then picks the character
transformer in the model select box, trains it for a few steps ("run again") and asserts that
it lowered the loss and wrote a sample, that the console stayed free of errors, that the phone-sized layout does not overflow, and that non-empty PNG screenshots were
saved.

    python3 web/page_test.py [--screenshot PATH] [--timeout SECONDS]

Chromium's flags are those of the browser tests (tests/browser/webdriver.json); chromedriver
is $CHROMEDRIVER or the one on PATH.
"""

import argparse
import base64
import functools
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WEB = os.path.join(ROOT, "web")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class WebDriver:
    def __init__(self, url):
        self.url = url
        self.session = None

    def call(self, method, path, body=None, timeout=60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.load(r)["value"]
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"webdriver {method} {path}: {e.read().decode()[:2000]}") from None

    def start(self, args):
        caps = {"browserName": "chrome", "goog:chromeOptions": {"args": args},
                "goog:loggingPrefs": {"browser": "ALL"}}
        binary = os.environ.get("CHROMIUM") or shutil.which("chromium")
        if binary:
            caps["goog:chromeOptions"]["binary"] = binary
        value = self.call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})
        self.session = value["sessionId"]

    def s(self, path):
        return f"/session/{self.session}{path}"

    def js(self, script):
        return self.call("POST", self.s("/execute/sync"), {"script": script, "args": []})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--screenshot", default=os.path.join(ROOT, "target", "web-demo.png"))
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--transformer-steps", type=int, default=12,
                    help="steps of the character transformer's run (0: skip it)")
    opts = ap.parse_args()
    if not os.path.exists(os.path.join(WEB, "pkg", "web_demo.js")):
        sys.exit("page_test: web/pkg is missing: run web/build.sh first")

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=WEB))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    page = f"http://127.0.0.1:{server.server_address[1]}/index.html"

    driver_bin = os.environ.get("CHROMEDRIVER") or shutil.which("chromedriver")
    if not driver_bin:
        sys.exit("page_test: chromedriver not found (set CHROMEDRIVER or install chromium-driver)")
    port = free_port()
    driver = subprocess.Popen([driver_bin, f"--port={port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wd = WebDriver(f"http://127.0.0.1:{port}")
    try:
        for _ in range(100):
            try:
                wd.call("GET", "/status", timeout=2)
                break
            except (OSError, RuntimeError):
                time.sleep(0.1)
        with open(os.path.join(ROOT, "tests", "browser", "webdriver.json")) as f:
            args = json.load(f)["goog:chromeOptions"]["args"]
        args = ["--headless", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1100,800"] + args
        wd.start(args)
        t0 = time.time()
        wd.call("POST", wd.s("/url"), {"url": page})
        status = "pending"
        while time.time() - t0 < opts.timeout:
            status = wd.js("return document.getElementById('result').dataset.status")
            if status != "pending":
                break
            time.sleep(0.2)
        elapsed = time.time() - t0
        text = wd.js("return document.getElementById('result').textContent")
        report = wd.js("return window.demoReport || null")
        train = wd.js("return window.trainReport || null")
        # The second model: the character transformer, a few steps ("run again").
        char = None
        char_elapsed = 0.0
        if status == "pass" and opts.transformer_steps > 0:
            t1 = time.time()
            wd.js("const m = document.getElementById('model'); m.value = 'char_transformer';"
                  "m.onchange(); document.getElementById('batch').value = 4;"
                  f"document.getElementById('steps').value = {opts.transformer_steps};"
                  "document.getElementById('again').click();")
            while time.time() - t1 < opts.timeout:
                char = wd.js("const r = window.trainReport;"
                             "return r && r.model === 'char_transformer' && "
                             "document.getElementById('result').dataset.status !== 'pending' ? r : null")
                if char:
                    break
                time.sleep(0.2)
            char_elapsed = time.time() - t1
            status = wd.js("return document.getElementById('result').dataset.status")
            text = wd.js("return document.getElementById('result').textContent")
        shot = base64.b64decode(wd.call("GET", wd.s("/screenshot")))
        os.makedirs(os.path.dirname(os.path.abspath(opts.screenshot)), exist_ok=True)
        with open(opts.screenshot, "wb") as f:
            f.write(shot)
        # Errors logged to the console (a missing favicon, an uncaught exception).
        console = [e for e in wd.call("POST", wd.s("/se/log"), {"type": "browser"}) or []
                   if e.get("level") == "SEVERE"]
        # A phone-sized window (390 x 844): the page must not overflow horizontally.
        wd.call("POST", wd.s("/window/rect"), {"width": 390, "height": 844})
        time.sleep(0.3)
        widths = wd.js("return [document.scrollingElement.scrollWidth, window.innerWidth]")
        phone = base64.b64decode(wd.call("GET", wd.s("/screenshot")))
        phone_path = opts.screenshot.replace(".png", "-phone.png")
        with open(phone_path, "wb") as f:
            f.write(phone)
        wd.call("DELETE", wd.s(""))
    finally:
        driver.terminate()
        driver.wait(10)
        server.shutdown()

    print(f"page_test: {page} -> status {status!r} ({text!r}) after {elapsed:.1f} s")
    if report:
        a = report["adapter"]
        web = a.get("web") or {}
        print(f"page_test: adapter {a['name']!r} ({web.get('vendor', '')} {web.get('architecture', '')})"
              f" {a['backend']} {a['device_type']}, f16 {a['f16']}")
        for s in report["steps"]:
            print(f"page_test:   {s['name']:<18} {str(s['shape']):<14} first {s['first_ms']:8.2f} ms"
                  f"  median {s['median_ms']:8.2f} ms  cpu {s['cpu_ms']:8.2f} ms  max|err| {s['max_abs_err']:.2e}"
                  f" (tol {s['tol']:.1e}) {'pass' if s['pass'] else 'FAIL'}")
    ok = True
    if train:
        print(f"page_test: training: batch {train['batch']}, {train['steps']} steps, loss "
              f"{train['first_loss']:.3f} (first 5 steps) -> {train['last_loss']:.3f} (last 5), "
              f"test accuracy {train['test_accuracy']}")
    if opts.transformer_steps > 0:
        if char:
            print(f"page_test: char transformer: batch {char['batch']}, {char['steps']} steps in "
                  f"{char_elapsed:.1f} s, loss {char['first_loss']:.3f} (first 5 steps) -> "
                  f"{char['last_loss']:.3f} (last 5), sample {char['sample']!r}")
        if not char or not char["last_loss"] < char["first_loss"] or not char["sample"]:
            print(f"page_test: FAILED: the char transformer did not train, lower its loss and "
                  f"write a sample: {char and (char['first_loss'], char['last_loss'], char['sample'])}",
                  file=sys.stderr)
            ok = False
    size = os.path.getsize(opts.screenshot)
    print(f"page_test: screenshot {opts.screenshot} ({size} bytes)")
    if not train or not train["last_loss"] < train["first_loss"]:
        print(f"page_test: FAILED: the training loss did not fall: {train and (train['first_loss'], train['last_loss'])}",
              file=sys.stderr)
        ok = False
    if status != "pass":
        print(f"page_test: FAILED: the page reports {status!r}: {text}", file=sys.stderr)
        ok = False
    print(f"page_test: phone width: scrollWidth {widths[0]} vs innerWidth {widths[1]} ({phone_path})")
    if widths[0] > widths[1]:
        print("page_test: FAILED: the page overflows horizontally at phone size", file=sys.stderr)
        ok = False
    if console:
        print(f"page_test: FAILED: console errors: {console}", file=sys.stderr)
        ok = False
    if size == 0 or not shot.startswith(PNG_MAGIC):
        print("page_test: FAILED: the screenshot is empty or not a PNG", file=sys.stderr)
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
