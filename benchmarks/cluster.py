"""An emulated cluster on one machine: N nodes, each a network namespace whose processes see their own host
name (node0, node1, ...: a UTS namespace per started command), joined through a bridge by one veth per node
whose node end is shaped by a token bucket (`tc ... tbf`; None: unshaped). Every address is in 127.77.0.0/24
(route_localnet on), so no packet can leave the machine; within a node ranks share memory (Open MPI's vader),
between nodes they speak TCP over the veths. Needs root; `unavailable()` says why it cannot run here.

    with Cluster(nodes=2, ranks_per_node=2, rate="1gbit") as c:
        subprocess.run([*c.mpirun_argv(), sys.executable, "-m", "my.module"])          # mpirun --host ...
        procs = [subprocess.Popen(argv) for argv in c.torchrun_argvs(["-m", "my.module"])]   # a torchrun per node
        procs = [subprocess.Popen(argv, env=env) for argv, env in c.srun_tasks([...])]  # srun-like tasks
    (give mpirun's and torchrun's launches `env=c.launch_env()`: each rank's share of the machine's cores)

Names resolve inside the nodes only (`ip netns exec` lays /etc/netns/<namespace>/hosts over /etc/hosts);
the machine's own /etc/hosts is never touched. `down` removes every namespace, link and file the cluster
made, kills what still runs in its nodes, and is idempotent; the context manager calls it on exit, on
errors, on SIGTERM/SIGHUP/Ctrl-C and at interpreter exit.

    python -m benchmarks.cluster up --nodes 2 --ranks-per-node 2 --rate 1gbit   # prints how to launch
    python -m benchmarks.cluster run --nodes 2 -- python -m my.module           # up, mpirun, down
    python -m benchmarks.cluster down                                           # remove it"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Mapping, Optional, Sequence

from benchmarks.run_ranks import worker_env

SUBNET = "127.77.0.0/24"
RATES = ("10gbit", "1gbit", "100mbit")
STATE = Path("/tmp/pycomm-cluster")  # <name>/agent: Open MPI's rsh agent for that cluster
NETNS_ETC = Path("/etc/netns")  # <namespace>/hosts: the nodes' names, seen inside the nodes only
DEFAULT_NAME = "pcc"


def address(node: int) -> str:
    return f"127.77.0.{node + 1}"


def hostname(node: int) -> str:
    return f"node{node}"


def _run(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _check_name(name: str) -> str:
    if not re.fullmatch(r"[a-z][a-z0-9]{0,8}", name):  # link names are at most 15 bytes: <name>br, <name>v<k>
        raise ValueError(f"cluster name {name!r}: expected 1-9 lower-case letters and digits, starting with a letter")
    return name


def _check_rate(rate: Optional[str]) -> Optional[str]:
    if rate is not None and not re.fullmatch(r"\d+(\.\d+)?([kmg]?bit)", rate):
        raise ValueError(f"cluster rate {rate!r}: expected a tc rate such as {', '.join(RATES)}, or None (unshaped)")
    return rate


def burst_bytes(rate: str) -> int:
    """tbf's bucket for `rate`: 1 MiB, or 10 ms of the rate where that is more (a bucket smaller than what
    the rate sends per kernel tick caps the link below the rate)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate)
    assert m is not None, rate  # checked by _check_rate
    bits = float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2]]
    return max(1 << 20, int(bits / 8 / 100))


@functools.lru_cache(maxsize=None)
def unavailable() -> Optional[str]:
    """Why an emulated cluster cannot be made here, or None when it can (tried for real once, a node with a
    shaped link: a container may be root without the capabilities namespaces and qdiscs need)."""
    if os.geteuid() != 0:
        return "the emulated cluster needs root (network namespaces, veth links, tc qdiscs)"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"the emulated cluster needs `{tool}` (apt-get install {package}; scripts/setup.sh --test does)"
    probe = Cluster(nodes=1, ranks_per_node=1, rate="1gbit", name=f"pcq{os.getpid() % 1000000}")
    try:
        probe.up()
    except RuntimeError as e:
        return f"cannot make the emulated cluster here: {e}"
    finally:
        probe.down()
    return None


class Cluster:
    """`nodes` namespaces of `ranks_per_node` ranks each, linked at `rate` (see the module's docstring)."""

    def __init__(
        self, nodes: int = 2, ranks_per_node: int = 1, rate: Optional[str] = "1gbit", name: Optional[str] = None
    ) -> None:
        if not isinstance(nodes, int) or not 1 <= nodes <= 250:
            raise ValueError(f"Cluster: nodes={nodes!r}: expected a whole number from 1 to 250")
        if not isinstance(ranks_per_node, int) or ranks_per_node < 1:
            raise ValueError(f"Cluster: ranks_per_node={ranks_per_node!r}: expected a whole number >= 1")
        self.nodes, self.ranks_per_node, self.rate = nodes, ranks_per_node, _check_rate(rate)
        self.name = _check_name(name or f"pcc{os.getpid() % 1000000}")
        self._old_handlers: dict[int, object] = {}

    # ---- where things are ----
    def namespace(self, node: int) -> str:
        return f"{self.name}n{node}"

    def veth(self, node: int) -> str:
        """The machine's end of node `node`'s link: its tx counts bytes into the node, rx bytes out of it."""
        return f"{self.name}v{node}"

    @property
    def bridge(self) -> str:
        return f"{self.name}br"

    @property
    def agent(self) -> Path:
        return STATE / self.name / "agent"

    @property
    def size(self) -> int:
        return self.nodes * self.ranks_per_node

    def link_bytes(self, node: int) -> tuple[int, int]:
        """(bytes into, bytes out of) node `node` over its link so far."""
        stats = Path("/sys/class/net") / self.veth(node) / "statistics"
        return int((stats / "tx_bytes").read_text()), int((stats / "rx_bytes").read_text())

    # ---- launching ----
    def launch_env(self, extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
        """The environment for a launch on this cluster (worker_env's, then `extra`): the emulated nodes share
        this machine's cores, so each rank gets its share of them for the kernels' OpenMP threads and torch's
        (launchers count only a node's own ranks and give each a whole emulated node's worth: 2 ranks x 2
        threads on 2 cores made every int8 kernel wait ~20 ms for a descheduled thread, 172 ms per all-reduce
        against 38 ms with 1 thread)."""
        share = str(max(1, (os.cpu_count() or 1) // self.size))
        return worker_env({"PYCOMM_NUM_THREADS": share, "OMP_NUM_THREADS": share, **(extra or {})})

    def enter(self, node: int) -> list[str]:
        """The prefix that runs a command on node `node`: in its namespace, under its host name."""
        return [
            "ip",
            "netns",
            "exec",
            self.namespace(node),
            "unshare",
            "--uts",
            "/bin/sh",
            "-c",
            'hostname "$0" && exec "$@"',
            hostname(node),
        ]

    def mpirun_argv(self, mca: Sequence[str] = (), nodes: Optional[Sequence[int]] = None) -> list[str]:
        """mpirun on the first of `nodes` (None: every node) over their slots, its remote daemons started in
        their nodes by the rsh agent; vader inside a node, TCP between nodes. `mca`: more "key=value"
        settings. nodes=[0]: a job on node 0 alone, e.g. what is left after losing the others."""
        nodes = list(range(self.nodes)) if nodes is None else list(nodes)
        if not nodes or any(not 0 <= k < self.nodes for k in nodes):
            raise ValueError(f"Cluster.mpirun_argv: nodes={nodes!r}: expected some of 0 .. {self.nodes - 1}")
        hosts = ",".join(f"{hostname(k)}:{self.ranks_per_node}" for k in nodes)
        argv = [
            *self.enter(nodes[0]),
            "mpirun",
            "-n",
            str(len(nodes) * self.ranks_per_node),
            "--host",
            hosts,
            "--map-by",
            "slot",
            "--oversubscribe",
            "--bind-to",
            "none",
            "--allow-run-as-root",
            "--mca",
            "plm_rsh_agent",
            str(self.agent),
            "--mca",
            "btl",
            "self,vader,tcp",
            "--mca",
            "btl_tcp_if_include",
            SUBNET,
            "--mca",
            "oob_tcp_if_include",
            SUBNET,
        ]
        for kv in mca:
            key, _, value = kv.partition("=")
            argv += ["--mca", key, value]
        return argv

    def torchrun_argvs(self, args: Sequence[str], port: int = 29400) -> list[list[str]]:
        """One `torchrun --nnodes N --node-rank k` per node, rendezvous on node 0 (static: node k is node k);
        args: what torchrun runs, e.g. ["-m", "my.module"]."""
        return [
            [
                *self.enter(k),
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                str(self.nodes),
                "--node-rank",
                str(k),
                "--nproc-per-node",
                str(self.ranks_per_node),
                "--rdzv-endpoint",
                f"{address(0)}:{port}",
                *args,
            ]
            for k in range(self.nodes)
        ]

    def nodelist(self) -> str:
        return "node0" if self.nodes == 1 else f"node[0-{self.nodes - 1}]"

    def srun_tasks(
        self, argv: Sequence[str], job_id: int = 4242, env: Optional[Mapping[str, str]] = None
    ) -> list[tuple[list[str], dict[str, str]]]:
        """(argv, environment) of every task of an `srun --mpi=none` step, placed node by node (block), with
        the variables slurmstepd gives a task; each argv starts the task on its node."""
        per_node = f"{self.ranks_per_node}(x{self.nodes})" if self.nodes > 1 else str(self.ranks_per_node)
        common = {
            "SLURM_JOB_ID": str(job_id),
            "SLURM_JOBID": str(job_id),
            "SLURM_STEP_ID": "0",
            "SLURM_NTASKS": str(self.size),
            "SLURM_STEP_NUM_TASKS": str(self.size),
            "SLURM_NNODES": str(self.nodes),
            "SLURM_STEP_NUM_NODES": str(self.nodes),
            "SLURM_JOB_NODELIST": self.nodelist(),
            "SLURM_STEP_NODELIST": self.nodelist(),
            "SLURM_TASKS_PER_NODE": per_node,
            "SLURM_STEP_TASKS_PER_NODE": per_node,
        }
        tasks = []
        for rank in range(self.size):
            node, local = divmod(rank, self.ranks_per_node)
            task_env = {k: v for k, v in self.launch_env(env).items() if not k.startswith("SLURM_")}
            task_env.update(
                common,
                SLURM_PROCID=str(rank),
                SLURM_LOCALID=str(local),
                SLURM_NODEID=str(node),
                SLURMD_NODENAME=hostname(node),
            )
            tasks.append(([*self.enter(node), *argv], task_env))
        return tasks

    # ---- making and removing ----
    def up(self) -> "Cluster":
        """Make the cluster; on any failure remove what was made. A cluster of this name must not exist."""
        existing = leftovers(self.name)
        if existing:  # not ours to remove: another process's cluster, or one `up` left for later use
            raise RuntimeError(
                f"cluster {self.name!r} exists already ({', '.join(existing)}): remove it with "
                f"`python -m benchmarks.cluster down --name {self.name}` or pick another name"
            )
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def _up(self) -> None:
        if shutil.which("ip") is None:
            raise RuntimeError("`ip` not found (apt-get install iproute2)")
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "link", "set", self.bridge, "up")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{address(k)} {hostname(k)}\n" for k in range(self.nodes))
        for k in range(self.nodes):
            ns, inner = self.namespace(k), f"{self.name}p{k}"
            _run("ip", "netns", "add", ns)
            (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / ns / "hosts").write_text(hosts)
            _run("ip", "link", "add", self.veth(k), "type", "veth", "peer", "name", inner)
            _run("ip", "link", "set", self.veth(k), "master", self.bridge, "up")
            _run("ip", "link", "set", inner, "netns", ns)
            # lo keeps 127.0.0.1 alone (/32): with the usual /8 every 127.x address would be this node's own
            script = (
                f"ip link set {inner} name nic0 && ip link set lo up && ip addr del 127.0.0.1/8 dev lo && "
                f"ip addr add 127.0.0.1/32 dev lo && sysctl -qw net.ipv4.conf.all.route_localnet=1 && "
                f"ip addr add {address(k)}/24 dev nic0 && sysctl -qw net.ipv4.conf.nic0.route_localnet=1 && "
                f"ip link set nic0 up"
            )
            if self.rate is not None:
                script += (
                    f" && tc qdisc add dev nic0 root tbf rate {self.rate} burst {burst_bytes(self.rate)} latency 10ms"
                )
            _run("ip", "netns", "exec", ns, "/bin/sh", "-c", script)
        self.agent.parent.mkdir(parents=True, exist_ok=True)
        self.agent.write_text(self._agent_script())
        self.agent.chmod(0o755)

    def _agent_script(self) -> str:
        """Open MPI's rsh agent: `agent HOST COMMAND...` runs the command line on HOST's node, as ssh would
        (words joined, then read by a shell)."""
        cases = "".join(
            f"  {hostname(k)}|{address(k)}) ns={self.namespace(k)}; name={hostname(k)};;\n" for k in range(self.nodes)
        )
        return (
            "#!/bin/sh\n# rsh agent of the emulated cluster " + self.name + " (benchmarks/cluster.py)\n"
            'case "$1" in\n' + cases + '  *) echo "cluster agent: no node named $1" >&2; exit 255;;\nesac\nshift\n'
            'exec ip netns exec "$ns" unshare --uts /bin/sh -c \'hostname "$1" && exec /bin/sh -c "$2"\' '
            'sh "$name" "$*"\n'
        )

    def down(self) -> None:
        """Remove everything this cluster (by its name) made; what is already gone is skipped."""
        down(self.name)

    def __enter__(self) -> "Cluster":
        self._guard(True)
        try:
            return self.up()
        except BaseException:
            self._guard(False)
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.down()
        finally:
            self._guard(False)

    def _guard(self, on: bool) -> None:
        """While the cluster is up, interpreter exit and SIGTERM/SIGHUP remove it too (Ctrl-C's
        KeyboardInterrupt already unwinds through __exit__)."""
        if on:
            atexit.register(self.down)
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGTERM, signal.SIGHUP):
                    self._old_handlers[sig] = signal.signal(sig, _exit_on_signal)
            return
        atexit.unregister(self.down)
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._old_handlers.clear()


def _exit_on_signal(signum: int, frame: Optional[FrameType]) -> None:
    raise SystemExit(128 + signum)  # unwinds through __exit__, which removes the cluster


def node_pids(namespace: str) -> list[int]:
    proc = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def down(name: str = DEFAULT_NAME) -> None:
    """Remove cluster `name`: kill what runs in its nodes, delete its namespaces, links, hosts files and agent."""
    _check_name(name)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for ns in re.findall(rf"^({name}n\d+)\b", listed, flags=re.M):
        for pid in node_pids(ns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for dev in re.findall(rf"^\d+: ({name}(?:br|v\d+))[@:]", links, flags=re.M):
        subprocess.run(["ip", "link", "del", dev], capture_output=True)
    for d in NETNS_ETC.glob(f"{name}n*") if NETNS_ETC.is_dir() else []:
        if re.fullmatch(rf"{name}n\d+", d.name):
            shutil.rmtree(d, ignore_errors=True)
    if NETNS_ETC.is_dir() and not any(NETNS_ETC.iterdir()):
        NETNS_ETC.rmdir()
    shutil.rmtree(STATE / name, ignore_errors=True)
    if STATE.is_dir() and not any(STATE.iterdir()):
        STATE.rmdir()


def leftovers(name: str) -> list[str]:
    """What of cluster `name` still exists (namespaces, links): empty after `down`."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return re.findall(rf"^({name}n\d+)\b", ns, flags=re.M) + re.findall(
        rf"^\d+: ({name}(?:br|v\d+|p\d+))[@:]", links, flags=re.M
    )


if __name__ == "__main__":
    from benchmarks.cluster_cli import main  # the command line, apart: this module is the cluster

    sys.exit(main())
