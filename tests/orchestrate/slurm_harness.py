"""A Slurm cluster on this host for tests: munged, slurmctld and four slurmd (a node with two
fake H100 GPUs as GRES, a node with one fake H100 and one fake V100, and two alike CPU-only
nodes: backfill gives each hetjob component nodes of its own), in a private folder with free
ports.  Every step has a deadline; without the packages, root, or a working daemon,
``start`` raises ``Unavailable`` with the reason."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")
NODES = {"fwgpu": "Gres=gpu:h100:2 Feature=gpu,h100 Weight=10",
         "fwmix": "Gres=gpu:h100:1,gpu:v100:1 Feature=gpu,h100,v100 Weight=20",
         "fwcpu": "Feature=cpu Weight=1",
         "fwcpu2": "Feature=cpu Weight=1"}
GRES = {"fwgpu": [("h100", "gpu[0-1]")], "fwmix": [("h100", "gpu2"), ("v100", "gpu3")]}
CPUS, MEMORY_MB = 4, 3000


class Unavailable(Exception):
    """Slurm cannot run here; the message says why."""


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(Path(d) / name) for d in SBIN if (Path(d) / name).exists()), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SlurmCluster:
    """Start with `start`, end with `stop`; `env` is what clients (sbatch, sinfo) need."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fws-", dir="/tmp"))  # short socket paths
        self.dir.chmod(0o755)
        self.conf = self.dir / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.pidfiles: list[Path] = []

    def _run(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), capture_output=True, text=True, env=self.env,
                              timeout=timeout, check=False)

    def _daemon(self, *args: str, pidfile: Path) -> None:
        self.pidfiles.append(pidfile)
        done = self._run(*args)
        if done.returncode != 0:
            raise Unavailable(f"{Path(args[0]).name} did not start: "
                              f"{' '.join((done.stderr or done.stdout).split())[:300]}")

    def start(self) -> None:
        tools = {n: _which(n) for n in ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")}
        missing = [n for n, path in tools.items() if path is None]
        if missing:
            raise Unavailable(f"{', '.join(missing)} not installed (Debian: apt-get install "
                              "slurm-wlm munge)")
        if os.geteuid() != 0:
            raise Unavailable("slurmd needs root here (it runs jobs as their user)")
        host = socket.gethostname().split(".")[0]
        (self.dir / "munge.key").write_bytes(os.urandom(1024))
        (self.dir / "munge.key").chmod(0o600)
        munge = self.dir / "munge.socket"
        self._daemon(str(tools["munged"]), f"--key-file={self.dir / 'munge.key'}",
                     f"--socket={munge}", f"--pid-file={self.dir / 'munged.pid'}",
                     f"--log-file={self.dir / 'munged.log'}",
                     f"--seed-file={self.dir / 'munged.seed'}",
                     pidfile=self.dir / "munged.pid")
        devices = self.dir / "dev"
        devices.mkdir()
        for index in range(4):
            (devices / f"gpu{index}").touch()
        ports = {name: _free_port() for name in ("ctld", *NODES)}
        lines = [
            "ClusterName=fwtest", f"SlurmctldHost={host}", f"SlurmctldPort={ports['ctld']}",
            "AuthType=auth/munge", f"AuthInfo=socket={munge}",
            f"StateSaveLocation={self.dir / 'state'}", f"SlurmdSpoolDir={self.dir}/spool-%n",
            f"SlurmctldPidFile={self.dir / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.dir}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.dir / 'slurmctld.log'}",
            f"SlurmdLogFile={self.dir}/slurmd-%n.log",
            "SlurmUser=root", "SlurmdUser=root", "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU_Memory", "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=1", "GresTypes=gpu",
            "SlurmdParameters=config_overrides", "ReturnToService=2", "MpiDefault=none",
            "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none", "MailProg=/bin/true", "KillWait=30",
            f"FirstJobId={1000 + os.getpid() % 50000}",  # job folders /tmp/fwr-ID unique
        ]
        for name, extra in NODES.items():
            lines.append(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 "
                         f"Port={ports[name]} CPUs={CPUS} RealMemory={MEMORY_MB} {extra} "
                         "State=UNKNOWN")
        lines.append(f"PartitionName=fw Nodes={','.join(NODES)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (self.dir / "gres.conf").write_text("".join(
            f"NodeName={node} Name=gpu Type={kind} File={devices}/{files}\n"
            for node, kinds in GRES.items() for kind, files in kinds))
        (self.dir / "state").mkdir()
        for name in NODES:
            (self.dir / f"spool-{name}").mkdir()
        self._daemon(str(tools["slurmctld"]), "-f", str(self.conf),
                     pidfile=self.dir / "slurmctld.pid")
        for name in NODES:
            self._daemon(str(tools["slurmd"]), "-f", str(self.conf), "-N", name,
                         pidfile=self.dir / f"slurmd-{name}.pid")
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline:
            done = self._run("sinfo", "-h", "-N", "-o", "%N %t", timeout=10)
            state = done.stdout.strip() or done.stderr.strip()
            if sorted(state.splitlines()) == [f"{n} idle" for n in sorted(NODES)]:
                return
            time.sleep(0.5)
        raise Unavailable(f"the test cluster's nodes did not come up in 60 s: {state[:300]}")

    def log(self, name: str) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / name).read_text()[-3000:]
        return ""

    def stop(self) -> None:
        """Cancel every job, then end the daemons (TERM, then KILL), and remove the folder."""
        with contextlib.suppress(Exception):
            self._run("scancel", "--user=root", timeout=10)
        pids = []
        for pidfile in reversed(self.pidfiles):
            with contextlib.suppress(OSError, ValueError):
                pids.append(int(pidfile.read_text().split()[0]))
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(_alive(p) for p in pids):
                time.sleep(0.2)
        shutil.rmtree(self.dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return False
    return True
