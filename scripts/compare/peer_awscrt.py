#!/usr/bin/env python3
"""The LMCache S3 data path rebuilt on awscrt's S3Client, for `scripts/compare/compare.py`.

LMCache's S3 connector drives awscrt's `S3Client` from asyncio: an `asyncio.Semaphore` bounds
requests in flight; each PUT first copies the chunk into a `/dev/shm` buffer file and sends
that file (`send_filepath`); each GET receives into a `/dev/shm` buffer file
(`recv_filepath`) and then copies it into the caller's buffer; completion is noticed by polling
a `threading.Event` every 5 ms. Signing is awscrt's default for S3 (SigV4 headers,
`UNSIGNED-PAYLOAD`). This script does the same with our own code, against one bucket, and
prints one JSON object with the same fields as `kvtier bench --json` phases: MiB/s and client
CPU seconds (user + system of this process, every thread) per GiB, for the PUT and GET phases.

Payloads are distinct random bytes (Garage deduplicates identical blocks); every GET is
verified against what was PUT. Objects are deleted afterwards (not timed).

Usage: peer_awscrt.py --endpoint http://127.0.0.1:3900 --bucket B --region garage
       --chunks 256 --chunk-size 4194304 --concurrency 16 [--prefix P]
Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
"""

import argparse
import asyncio
import ctypes
import json
import mmap
import os
import resource
import sys
import tempfile
import threading
import time
from urllib.parse import quote, urlparse

from awscrt import auth, io, s3
from awscrt.http import HttpHeaders, HttpRequest

GIB = 1024.0**3
MIB = 1024.0**2


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class ShmPool:
    """`count` buffer files of `size` bytes in /dev/shm, each mapped into this process."""

    def __init__(self, count: int, size: int):
        self.free = []
        self.all = []
        for i in range(count):
            f = tempfile.NamedTemporaryFile(
                prefix=f"kvtier_peer_{i}_", suffix=".part", dir="/dev/shm", delete=False
            )
            os.ftruncate(f.fileno(), size)
            mm = mmap.mmap(f.fileno(), size)
            f.close()
            addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            self.all.append((f.name, mm))
            self.free.append((f.name, mm, addr))

    def take(self):
        return self.free.pop()

    def give(self, item):
        self.free.append(item)

    def close(self):
        for name, mm in self.all:
            try:
                mm.close()
            except BufferError:
                pass
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass


class Peer:
    def __init__(self, args):
        ep = urlparse(args.endpoint)
        self.host = ep.netloc
        self.bucket = args.bucket
        self.region = args.region
        self.prefix = args.prefix
        elg = io.EventLoopGroup(args.io_threads)
        resolver = io.DefaultHostResolver(elg)
        bootstrap = io.ClientBootstrap(elg, resolver)
        self.creds = auth.AwsCredentialsProvider.new_static(
            os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
        )
        tls = s3.S3RequestTlsMode.DISABLED if ep.scheme == "http" else s3.S3RequestTlsMode.ENABLED
        self.client = s3.S3Client(
            bootstrap=bootstrap,
            region=args.region,
            credential_provider=self.creds,
            tls_mode=tls,
        )
        self.sema = asyncio.Semaphore(args.concurrency)
        self.pool = ShmPool(args.concurrency, args.chunk_size)
        self.size = args.chunk_size

    def path(self, name: str) -> str:
        # Path-style addressing: /<bucket>/<key>.
        return quote(f"/{self.bucket}/{self.prefix}{name}", safe="/")

    def request(self, method, name, kind, op, **kw):
        headers = HttpHeaders()
        headers.add("Host", self.host)
        if method == "PUT":
            headers.add("Content-Length", str(self.size))
        done = threading.Event()
        got = {}

        def on_done(error=None, status_code=None, **_):
            got["error"] = error
            got["status"] = status_code
            done.set()

        s3.S3Request(
            client=self.client,
            type=kind,
            request=HttpRequest(method, self.path(name), headers),
            operation_name=op,
            credential_provider=self.creds,
            region=self.region,
            on_done=on_done,
            **kw,
        )
        return done, got

    async def wait(self, done):
        while not done.is_set():
            await asyncio.sleep(0.005)

    async def put(self, name: str, payload: bytearray) -> bool:
        async with self.sema:
            item = self.pool.take()
            try:
                shm_name, _, addr = item
                ctypes.memmove(addr, (ctypes.c_char * len(payload)).from_buffer(payload), len(payload))
                done, got = self.request(
                    "PUT", name, s3.S3RequestType.PUT_OBJECT, "PutObject", send_filepath=shm_name
                )
                await self.wait(done)
                return got["error"] is None and got["status"] in (200, 201)
            finally:
                self.pool.give(item)

    async def get(self, name: str, dst: bytearray) -> bool:
        async with self.sema:
            item = self.pool.take()
            try:
                shm_name, _, addr = item
                done, got = self.request(
                    "GET", name, s3.S3RequestType.GET_OBJECT, "GetObject", recv_filepath=shm_name
                )
                await self.wait(done)
                if got["error"] is not None or got["status"] not in (200, 206, None):
                    return False
                ctypes.memmove((ctypes.c_char * len(dst)).from_buffer(dst), addr, len(dst))
                return True
            finally:
                self.pool.give(item)

    async def delete(self, name: str) -> None:
        async with self.sema:
            done, _ = self.request("DELETE", name, s3.S3RequestType.DEFAULT, "DeleteObject")
            await self.wait(done)


def phase(name, keys, nbytes, seconds, cpu):
    gib = nbytes / GIB
    return {
        "phase": name,
        "keys": keys,
        "bytes": nbytes,
        "seconds": seconds,
        "mib_per_s": nbytes / MIB / seconds if seconds > 0 else 0.0,
        "cpu_s": cpu,
        "cpu_s_per_gib": cpu / gib if gib > 0 else None,
        "peak_rss_mib": peak_rss_mib(),
    }


async def run(args):
    peer = Peer(args)
    # LMCache-style object names, like kvtier's bench keys (model@rank@hash[@salt]): the
    # server's cost per object depends on where its name lands in the metadata index.
    nonce = os.urandom(8).hex()
    models = ["llama-3.1-8b", "mistral-7b", "qwen2.5-72b"]
    salts = [None, "tenant-a", "tenant-b"]
    names = []
    for i in range(args.chunks):
        name = f"{models[i % 3]}@{(i // 3) % 4:08x}@{nonce}{i:016x}"
        salt = salts[(i // 12) % 3]
        names.append(name if salt is None else f"{name}@{salt}")
    payloads = [bytearray(os.urandom(args.chunk_size)) for _ in range(args.chunks)]
    buffers = [bytearray(args.chunk_size) for _ in range(args.chunks)]
    for b in buffers:  # pre-fault the caller's buffers, as kvtier's bench does
        b[::4096] = b"\x01" * len(b[::4096])
    phases = []
    try:
        c0, t0 = cpu_seconds(), time.perf_counter()
        ok = await asyncio.gather(*(peer.put(n, p) for n, p in zip(names, payloads)))
        t1, c1 = time.perf_counter(), cpu_seconds()
        put_ok = sum(ok)
        phases.append(phase("store", args.chunks, put_ok * args.chunk_size, t1 - t0, c1 - c0))

        c0, t0 = cpu_seconds(), time.perf_counter()
        ok = await asyncio.gather(*(peer.get(n, b) for n, b in zip(names, buffers)))
        t1, c1 = time.perf_counter(), cpu_seconds()
        get_ok = sum(ok)
        phases.append(phase("load", args.chunks, get_ok * args.chunk_size, t1 - t0, c1 - c0))
        verified = get_ok == args.chunks and all(p == b for p, b in zip(payloads, buffers))
        errors = (args.chunks - put_ok) + (args.chunks - get_ok)
    finally:
        await asyncio.gather(*(peer.delete(n) for n in names))
        peer.pool.close()
    return {
        "client": "awscrt",
        "awscrt_version": getattr(__import__("awscrt"), "__version__", "unknown"),
        "verified": verified,
        "errors": errors,
        "chunks": args.chunks,
        "chunk_size": args.chunk_size,
        "concurrency": args.concurrency,
        "phases": phases,
        "peak_rss_mib": peak_rss_mib(),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", required=True, help="e.g. http://127.0.0.1:3900")
    p.add_argument("--bucket", required=True)
    p.add_argument("--region", default="garage")
    p.add_argument("--prefix", default="")
    p.add_argument("--chunks", type=int, default=256)
    p.add_argument("--chunk-size", type=int, default=4 * 1024 * 1024)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--io-threads", type=int, default=2, help="awscrt event-loop threads")
    args = p.parse_args()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        if not os.environ.get(k):
            sys.exit(f"peer_awscrt: {k} is not set")
    report = asyncio.run(run(args))
    print(json.dumps(report))
    sys.exit(0 if report["verified"] and report["errors"] == 0 else 1)


if __name__ == "__main__":
    main()
