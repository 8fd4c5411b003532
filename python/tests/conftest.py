"""Fixtures of the LMCache plugin suite: servers it starts itself, and LMCache's own way of
building an adapter.

* Garage (S3): a single-node server on 127.0.0.1 per session, from ``$KVTIER_GARAGE_BIN`` or
  ``$KVTIER_TOOLS_DIR/garage-2.5.0/bin/garage`` (``scripts/test-all.sh`` installs it). Its
  ``root_domain`` is ``.0.0.1``, so ``Host: 127.0.0.1:<port>`` means the bucket ``127`` in
  virtual-host style (how LMCache's built-in ``s3`` adapter addresses its bucket: ``Host`` is its
  endpoint), while kvtier reaches the same bucket path-style through ``localhost:<port>``.
* The Hub emulator (``hfbucket``): ``debug/examples/hub_emulator`` under cargo's target
  directory (``$CARGO_TARGET_DIR``, else ``target``), or ``$KVTIER_HUB_EMULATOR_BIN``, built by
  ``cargo build --example hub_emulator``.

A missing server binary fails the test that needs it, saying how to get it: nothing is skipped.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KEY_ID = "GK6b76746965722d706c7567696e2121"
SECRET = "6b76746965722d706c7567696e2d7365637265742d6b65792d666f722d67617261"
BUCKET = "127"
HUB_TOKEN = "hf_kvtier_plugin_test_token"
_counter = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{os.getpid()}-{next(_counter)}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until(what: str, check, timeout: float = 60.0):
    """Readiness of a server we started, or of an adapter joining its fleet index (not of
    adapter operations, which wait on eventfds)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            out = check()
            if out:
                return out
        except Exception as e:  # noqa: BLE001
            last = e
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not become ready in {timeout} s: {last}")


class Garage:
    def __init__(self) -> None:
        tools = Path(os.environ.get("KVTIER_TOOLS_DIR", Path.home() / ".cache/kvtier-tools"))
        self.bin = os.environ.get("KVTIER_GARAGE_BIN", str(tools / "garage-2.5.0/bin/garage"))
        if not os.access(self.bin, os.X_OK):
            pytest.fail(
                f"Garage not found at {self.bin}: run scripts/test-all.sh once (it installs "
                "garage 2.5.0 into $KVTIER_TOOLS_DIR) or set KVTIER_GARAGE_BIN",
                pytrace=False,
            )
        self.dir = Path(tempfile.mkdtemp(prefix="kvtier-plugin-garage-"))
        self.port = _free_port()
        rpc = _free_port()
        (self.dir / "garage.toml").write_text(
            f'metadata_dir = "{self.dir}/meta"\n'
            f'data_dir = "{self.dir}/data"\n'
            'db_engine = "sqlite"\n'
            "replication_factor = 1\n"
            f'rpc_bind_addr = "127.0.0.1:{rpc}"\n'
            f'rpc_public_addr = "127.0.0.1:{rpc}"\n'
            f'rpc_secret = "{os.urandom(32).hex()}"\n'
            "[s3_api]\n"
            f'api_bind_addr = "127.0.0.1:{self.port}"\n'
            's3_region = "garage"\n'
            'root_domain = ".0.0.1"\n'
        )
        env = dict(os.environ, GARAGE_DEFAULT_ACCESS_KEY=KEY_ID, GARAGE_DEFAULT_SECRET_KEY=SECRET)
        self.log = open(self.dir / "garage.log", "wb")
        self.proc = subprocess.Popen(
            [self.bin, "-c", str(self.dir / "garage.toml"), "server", "--single-node",
             "--default-access-key"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )
        _wait_until("garage", lambda: self._cli("bucket", "create", BUCKET))
        self._cli("bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", KEY_ID,
                  check=True)

    def _cli(self, *args: str, check: bool = False) -> bool:
        r = subprocess.run([self.bin, "-c", str(self.dir / "garage.toml"), *args],
                           capture_output=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"garage {' '.join(args)}: {r.stderr.decode()}")
        return r.returncode == 0

    def kvtier_params(self, **extra) -> dict:
        return {
            "type": "s3", "s3_endpoint": f"http://localhost:{self.port}", "s3_bucket": BUCKET,
            "s3_region": "garage", "disable_tls": True, "aws_access_key_id": KEY_ID,
            "aws_secret_access_key": SECRET, **extra,
        }

    def lmcache_params(self) -> dict:
        return {
            "type": "s3", "s3_endpoint": f"127.0.0.1:{self.port}", "s3_region": "garage",
            "disable_tls": True, "s3_prefer_http2": False, "s3_num_io_threads": 2,
            "aws_access_key_id": KEY_ID, "aws_secret_access_key": SECRET,
        }

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Hub:
    def __init__(self) -> None:
        target = Path(os.environ.get("CARGO_TARGET_DIR", "target"))
        if not target.is_absolute():
            target = REPO / target
        self.bin = os.environ.get(
            "KVTIER_HUB_EMULATOR_BIN", str(target / "debug/examples/hub_emulator"))
        if not os.access(self.bin, os.X_OK):
            pytest.fail(
                f"Hub emulator not found at {self.bin}: run `cargo build --example hub_emulator` "
                "in the repository (scripts/test-all.sh does) or set KVTIER_HUB_EMULATOR_BIN",
                pytrace=False,
            )
        self.proc = subprocess.Popen(
            [self.bin, "--port", "0", "--token", HUB_TOKEN],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        self.endpoint = self.proc.stdout.readline().strip()
        if not self.endpoint.startswith("http://127.0.0.1:"):
            self.proc.kill()
            raise RuntimeError(f"hub emulator printed {self.endpoint!r}, not its endpoint")

    def kvtier_params(self, bucket: str, **extra) -> dict:
        return {
            "type": "hfbucket", "bucket_handle": f"hf://buckets/kvtier/{bucket}",
            "hf_endpoint": self.endpoint, "token": HUB_TOKEN, "create_bucket_if_missing": True,
            **extra,
        }

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="session")
def garage():
    g = Garage()
    yield g
    g.stop()


@pytest.fixture(scope="session")
def hub():
    h = Hub()
    yield h
    h.stop()


@pytest.fixture
def redis_url():
    """A ``redis-server`` on 127.0.0.1 for fleet tests (Debian's package, which
    ``scripts/test-all.sh`` installs; or ``$KVTIER_REDIS_SERVER``), ended after the test."""
    binary = os.environ.get("KVTIER_REDIS_SERVER") or shutil.which("redis-server")
    if not binary:
        raise RuntimeError("the fleet tests need redis-server: apt-get install redis-server "
                           "(scripts/test-all.sh does), or set KVTIER_REDIS_SERVER")
    port = _free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", d], stdout=subprocess.DEVNULL)
        try:
            _wait_until("redis-server", lambda: socket.create_connection(("127.0.0.1", port)))
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.kill()
            proc.wait()


def lmcache_adapter(spec: dict):
    """Builds an adapter exactly as LMCache's MP server does: its ``--l2-adapter`` argument
    parser, then its factory."""
    from lmcache.v1.distributed.l2_adapters import create_l2_adapter
    from lmcache.v1.distributed.l2_adapters.config import (
        add_l2_adapters_args,
        parse_args_to_l2_adapters_config,
    )

    parser = argparse.ArgumentParser()
    add_l2_adapters_args(parser)
    config = parse_args_to_l2_adapters_config(
        parser.parse_args(["--l2-adapter", json.dumps(spec)]))
    return create_l2_adapter(config.adapters[0])


def plugin_spec(params: dict, **top) -> dict:
    return {"type": "plugin", "module_path": "kvtier.lmcache", "class_name": "KvtierL2Adapter",
            "adapter_params": params, **top}


@pytest.fixture
def make_adapter():
    """Builds adapters through LMCache and closes them at the end of the test."""
    made = []

    def make(spec: dict):
        a = lmcache_adapter(spec)
        made.append(a)
        return a

    yield make
    for a in made:
        a.close()


@pytest.fixture(params=["memory", "fs", "s3", "hfbucket"])
def backend(request, tmp_path):
    """kvtier adapter JSON for each backend, on fresh storage (a unique model name per test
    keeps tests on the shared S3 bucket apart)."""
    kind = request.param
    if kind == "memory":
        return {"type": "memory"}
    if kind == "fs":
        return {"type": "fs", "base_path": str(tmp_path / "fs")}
    if kind == "s3":
        return request.getfixturevalue("garage").kvtier_params(s3_key_prefix=unique("t"))
    return request.getfixturevalue("hub").kvtier_params(unique("b"))
