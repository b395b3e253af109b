"""Secrets in store URLs are never shown (issue 23, item 4): one function redacts every
secret-bearing part, and every surface that shows a URL uses it."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

import agentrewind
from agentrewind.stores.urls import redact_url
from agentrewind.ui.api import store_info

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://user:{SECRET}@h:6379/0", "redis://user:***@h:6379/0"),
        (f"redis://:{SECRET}@h/0", "redis://:***@h/0"),
        (f"redis://h:6379/0?password={SECRET}&prefix=x", "redis://h:6379/0?password=***&prefix=x"),
        (
            f"postgresql://u@h/db?sslpassword={SECRET}&sslkey=/k.pem&namespace=a",
            "postgresql://u@h/db?sslpassword=***&sslkey=/k.pem&namespace=a",
        ),
        (f"postgresql://u@h/db?PASSWORD={SECRET}", "postgresql://u@h/db?PASSWORD=***"),
        (f"rediss://h/0?auth_token={SECRET}", "rediss://h/0?auth_token=***"),
        (f"host=h dbname=d password={SECRET} user=u", "host=h dbname=d password=*** user=u"),
        (f"host=h password='{SECRET} x' user=u", "host=h password=*** user=u"),
        ("sqlite:///runs.db?durability=full", "sqlite:///runs.db?durability=full"),
        ("memory://x", "memory://x"),
    ],
)
def test_every_secret_bearing_part_is_redacted(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert SECRET not in redact_url(url)


def test_a_store_error_and_the_unknown_scheme_error_show_no_secret() -> None:
    with pytest.raises(ValueError) as caught:
        agentrewind.connect(f"mysql://u:{SECRET}@h/db?password={SECRET}")
    assert SECRET not in str(caught.value) and "***" in str(caught.value)


def test_redis_store_url_repr_errors_and_viewer_show_no_secret(redis_url: str) -> None:
    url = f"{redis_url}?password={SECRET}&namespace=t-secret"
    # a server without auth accepts any password? no: redis refuses AUTH without a password
    # set, so open with the password in the query on a URL whose server needs none is an
    # error; the error must not show it either.
    try:
        store = agentrewind.connect(url)
    except agentrewind.StoreError as exc:
        assert SECRET not in str(exc), exc
        return
    try:
        assert SECRET not in store.url and SECRET not in repr(store)
        assert SECRET not in json.dumps(store_info(store))
    finally:
        store.close()


def test_postgres_store_url_repr_and_viewer_show_no_secret(postgres_url: str) -> None:
    url = f"{postgres_url}?sslpassword={SECRET}&namespace=t-secret"
    with agentrewind.connect(url) as store:
        assert SECRET not in store.url and SECRET not in repr(store)
        assert "sslpassword=***" in store.url
        assert SECRET not in json.dumps(store_info(store))


def test_the_cli_and_the_viewer_banner_show_no_secret(postgres_url: str) -> None:
    url = f"{postgres_url}?sslpassword={SECRET}&namespace=t-secret"
    cli = [sys.executable, "-m", "agentrewind", "--store", url]
    for args in (["runs"], ["log", "nope"], ["cancel", "nope"]):
        out = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=60)
        assert SECRET not in out.stdout + out.stderr, (args, out)
    ui = subprocess.Popen([*cli, "ui", "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert ui.stdout is not None
        banner = ui.stdout.readline() + ui.stdout.readline()
        assert SECRET not in banner and "sslpassword=***" in banner, banner
        address = banner.split("serving on ")[1].split()[0]
        with urllib.request.urlopen(f"{address}/api/store", timeout=10) as response:
            body = response.read().decode()
        assert SECRET not in body and "***" in body
    finally:
        ui.terminate()
        ui.communicate(timeout=10)
