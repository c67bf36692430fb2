"""A Ray cluster fitwork starts keeps token authentication on unless the user turns it off."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fitwork
from fitwork.hardware.ray_cluster import has_token_auth, local_auth_mode

ROOT = Path(fitwork.__file__).parents[2]


def test_auth_mode_for_a_cluster_started_here() -> None:
    assert local_auth_mode({}, "2.60.0") == "token"
    assert local_auth_mode({}, "2.52.0") == "token"  # auth exists, off by Ray's default
    assert local_auth_mode({"RAY_AUTH_MODE": "disabled"}, "2.60.0") is None  # the user's call
    assert local_auth_mode({"RAY_AUTH_MODE": "token"}, "2.60.0") is None
    assert local_auth_mode({}, "2.51.1") is None  # no token auth to turn on
    assert has_token_auth("3.0.0.dev0") and not has_token_auth("2.9.3")


def test_no_fitwork_code_outside_tests_turns_ray_auth_off() -> None:
    offenders = []
    for folder in ("src", "bench", "examples"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value == "disabled":
                    text = path.read_text(encoding="utf-8")
                    if "RAY_AUTH_MODE" in text:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


PROBE = textwrap.dedent("""
    import json, os, ray
    from fitwork.hardware.ray_cluster import connect
    connect(timeout=120)
    from ray._raylet import AuthenticationMode, get_authentication_mode
    print(json.dumps({"env": os.environ.get("RAY_AUTH_MODE"),
                      "token": get_authentication_mode() == AuthenticationMode.TOKEN}))
    ray.shutdown()
""")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_cluster_fitwork_starts_has_token_auth(tmp_path: Path) -> None:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed: pip install 'fitwork[ray]'")
    import ray

    if not has_token_auth(ray.__version__):
        pytest.skip(f"Ray {ray.__version__} has no token authentication")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RAY_") or k == "RAY_num_cpus"}
    env["HOME"] = str(tmp_path)  # Ray keeps its generated token in ~/.ray/auth_token
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"env": "token", "token": True}
    assert (tmp_path / ".ray" / "auth_token").stat().st_size > 0
