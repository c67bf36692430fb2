"""A 2-CPU Ray cluster on this host held by a process of its own, for tests that run the CLI
against an address (its own temp dir; auth as the test environment says)."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

HOLDER = textwrap.dedent("""
    import sys, ray
    context = ray.init(num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False,
                       log_to_driver=False, _temp_dir=sys.argv[1])
    print(context.address_info["gcs_address"], flush=True)
    sys.stdin.read()  # the cluster lives until the test closes this pipe
    ray.shutdown()
""")


TOKEN = secrets.token_hex(32)


def env() -> dict[str, str]:
    """The environment the held cluster and the CLI runs against it share: token
    authentication with this module's token."""
    return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}


@contextmanager
def held_cluster(prefix: str) -> Iterator[str]:
    """The address of the held cluster, for as long as the ``with`` lasts."""
    temp = tempfile.mkdtemp(prefix=prefix)  # short: Unix socket paths are < 108 bytes
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, temp], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env())
    assert holder.stdout is not None and holder.stdin is not None
    try:
        address = holder.stdout.readline().strip()
        assert address, "the Ray cluster did not start"
        yield address
    finally:
        holder.stdin.close()
        try:
            holder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
        shutil.rmtree(temp, ignore_errors=True)
