"""A warm start for a local run's jobs: one process imports what jobs import, once, and forks a job from it.

Most of a small job's time is the Python process starting and importing torch, transformers, pandas and
matplotlib (4-7 s on a 2-core machine, where the demo's fine-tunes and score jobs compute for 5-10 s). On a
local run whose jobs use no GPU, the Snakefile starts `serve` when the run starts; each `forgetmap` command
of the run then hands its argv, environment, working directory and standard streams (as file descriptors,
over a Unix socket) to the server, which forks a child that runs the command exactly as the command line
would have, writing to the job's own log, and sends back the child's exit status. The client forwards a
signal it receives to the child, and a client that goes away takes its child with it.

The child is the process a fresh `forgetmap` would be, except for what its imports read from the environment
at import time: the server serves only clients whose environment is its own, save for the variables a job may
set for itself (threads); any other client, or any failure to reach the server, runs the command in its own
process as before. Never on a run with GPU jobs: CUDA must not be touched before a job claims its devices,
and a forked process cannot start CUDA that its parent started.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import struct
import sys

ENV = "FORGETMAP_WARM"  # the server's socket, where a run has one
# what a job may set for itself: its shell's own, its temporary directory (read again in the child) and its
# threads (the server imports with one thread each; a child sets its BLAS threads, and torch its own, to the job's)
THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "NUMEXPR_NUM_THREADS",
           "VECLIB_MAXIMUM_THREADS")
OWN = {"_", "SHLVL", "PWD", "OLDPWD", "TMPDIR", "TEMP", "TMP", "TEMPDIR", *THREADS}
PRELOAD = ("torch", "numpy", "pandas", "pyarrow.parquet", "scipy.stats", "scipy.optimize", "scipy.special",
           "matplotlib.pyplot", "seaborn", "transformers", "tokenizers",
           "forgetmap.models", "forgetmap.nll", "forgetmap.train", "forgetmap.score", "forgetmap.matrix",
           "forgetmap.generation", "forgetmap.plots")
PRELOAD_NAMES = (("transformers", ("AutoModelForCausalLM", "AutoTokenizer", "AutoConfig", "PreTrainedTokenizerFast",
                                   "LlamaForCausalLM", "LlamaConfig")),)


def _send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:
    data = json.dumps(message).encode()
    header = struct.pack("!I", len(data))
    if fds:
        socket.send_fds(sock, [header + data], list(fds))
    else:
        sock.sendall(header + data)


def _receive(sock: socket.socket, want_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (and the descriptors sent with it); None where the other end has closed."""
    if want_fds:
        data, fds, _, _ = socket.recv_fds(sock, 1 << 20, want_fds)
    else:
        data, fds = sock.recv(1 << 20), []
    if len(data) < 4:
        return None, fds
    size = struct.unpack("!I", data[:4])[0]
    data = data[4:]
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            return None, fds
        data += more
    return json.loads(data), fds


# --- the client: a `forgetmap` command of a run with a warm server ----------------------------------------


def run_remote(argv: list[str]) -> int | None:
    """Run `forgetmap argv` in a child of the run's warm server; its exit status, or None where there is no
    server to take it (the caller runs the command itself)."""
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        _send(sock, {"argv": list(argv), "env": dict(os.environ), "cwd": os.getcwd()}, [0, 1, 2])
        reply, _ = _receive(sock)
    except OSError:
        return None
    if not reply or "pid" not in reply:
        sock.close()
        return None  # declined: the environment differs from the server's
    child = reply["pid"]

    def forward(signum, frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        try:
            status, _ = _receive(sock)
            break
        except InterruptedError:
            continue
    return 1 if status is None else int(status["exit"])


# --- the server ---------------------------------------------------------------------------------------------


def preload() -> None:
    """Import what jobs import (the slow part of their start), without starting CUDA or any computation."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional part missing: its jobs import it themselves
            pass
    for module, names in PRELOAD_NAMES:
        package = importlib.import_module(module)
        for name in names:
            getattr(package, name, None)


def serve(path: str, parent: int, run) -> None:
    """Serve forks of this process at the Unix socket `path` until `parent` (the Snakemake run) ends or
    SIGTERM; each child calls `run(argv)` (the CLI's entry) and exits with what it returns; children still
    running at the end are terminated."""
    env = dict(os.environ)  # what a client's environment must be (but for OWN)
    os.environ.update(dict.fromkeys(THREADS, "1"))
    preload()
    os.environ.clear()
    os.environ.update(env)
    import torch

    if torch.cuda.is_initialized():  # a fork could not use CUDA: serve nothing
        return
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path + ".tmp")
    os.replace(path + ".tmp", path)  # clients connect only once it listens
    server.listen(64)
    print(f"serving at {path}: {', '.join(PRELOAD)} imported", file=sys.stderr, flush=True)
    children: dict[int, tuple] = {}  # child pid -> its client's connection, its command
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    try:
        while running[0] and os.getppid() == parent:
            ready, _, _ = select.select([server, *(conn for conn, _ in children.values())], [], [], 0.05)
            for sock in ready:
                if sock is server:
                    conn, _ = server.accept()
                    started = _start(conn, env, run)
                    if started:
                        children[started[0]] = (conn, started[1])
                else:  # a client went away: its child goes too
                    pid = next(p for p, (c, _) in children.items() if c is sock)
                    _kill(pid)
            _reap(children)
    finally:
        for pid in list(children):
            _kill(pid)
        _reap(children, block=True)
        server.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _differs(env: dict, client: dict) -> list[str]:
    keys = (set(env) | set(client)) - OWN
    return sorted(k for k in keys if env.get(k) != client.get(k))


def _start(conn: socket.socket, env: dict, run) -> tuple[int, str] | None:
    """Fork a child for the client on `conn` (its pid and command), or decline (the client runs the command
    itself)."""
    try:
        request, fds = _receive(conn, want_fds=3)
    except OSError:
        conn.close()
        return None
    differs = _differs(env, request["env"]) if request else []
    if request is None or len(fds) != 3 or differs:
        for fd in fds:
            os.close(fd)
        if request:
            print(f"declined: forgetmap {' '.join(request['argv'][:1])} (its environment differs: "
                  f"{', '.join(differs)}): it runs in its own process", file=sys.stderr, flush=True)
        _last_word(conn, {"declined": differs})
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the job
        _child(conn, request, fds, run)
    for fd in fds:
        os.close(fd)
    try:
        _send(conn, {"pid": pid})
    except OSError:
        _kill(pid)
    command = " ".join(request["argv"][:1])
    print(f"forked: forgetmap {command} (pid {pid})", file=sys.stderr, flush=True)
    return pid, command


def _child(conn: socket.socket, request: dict, fds: list[int], run) -> None:
    code = 1
    try:
        conn.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop(ENV, None)  # what it runs in turn starts cold
        from . import models

        models.FORKED = True  # its log says so (models.say_device): its time is learned from as a warm job's
        _own_threads_and_temp()
        sys.argv = ["forgetmap", *request["argv"]]  # the streams write to descriptors 1 and 2: the job's own
        code = run(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:  # what a process of its own runs as it exits: an engine's shutdown, shared memory unlinked, logs flushed
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _own_threads_and_temp() -> None:
    """What the job's environment says of its threads and its temporary directory, where the server's imports
    had read the server's."""
    import tempfile

    tempfile.tempdir = None  # read again from TMPDIR
    threads = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    if threads and threads.isdigit():
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            return
        threadpool_limits(int(threads))


def _last_word(conn: socket.socket, message: dict) -> None:
    """Tell a client how its request ended and close its connection (a client already gone hears nothing)."""
    try:
        _send(conn, message)
    except OSError:
        pass
    conn.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _reap(children: dict, block: bool = False) -> None:
    """Send each ended child's exit status to its client."""
    for pid in list(children):
        try:
            done, status, usage = os.wait4(pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            done, status, usage = pid, 1 << 8, None
        if not done:
            continue
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code  # killed by a signal: as a shell reports it
        conn, command = children.pop(pid)
        if usage:  # what a job's benchmark file measures of its client instead
            print(f"ended: forgetmap {command} (pid {pid}): exit {code}, peak RSS {usage.ru_maxrss / 1024:.1f} MB, "
                  f"CPU {usage.ru_utime + usage.ru_stime:.2f} s", file=sys.stderr, flush=True)
        _last_word(conn, {"exit": code})


def wanted(plan) -> bool:
    """A warm server for this local run: asked for (`warm_start`), no job of it claims a GPU, and its jobs are not
    submitted to a cluster (whose jobs start in processes of their own)."""
    if not plan.cfg.get("warm_start", True) or plan.cluster:
        return False
    return not any(resources["gpu"] for m in plan.computed
                   for resources in plan.cfg["models"][m]["resources"].values())


def commands_first() -> None:
    """Put the directory of the interpreter running Snakemake first on PATH where `forgetmap` is installed there:
    a virtualenv's `snakemake`, run without activating it, then finds its own `forgetmap` for every rule (and for
    the warm server), not another one or none."""
    import sys

    here = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(here, "forgetmap")):
        os.environ["PATH"] = os.pathsep.join([here, os.environ.get("PATH", "")])


def start(plan, log: str):
    """Start the run's server (when `wanted`) and point this process's jobs at it; the handle `stop` takes."""
    import shutil
    import subprocess
    import tempfile

    command = shutil.which("forgetmap")
    if not wanted(plan) or command is None:
        return None
    directory = tempfile.mkdtemp(prefix="forgetmap-warm-")
    path = os.path.join(directory, "socket")
    env = {**os.environ, "PYTHONHASHSEED": "0", ENV: path}  # as every job's shell sets it (the Snakefile)
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "w") as out:
        process = subprocess.Popen([command, "warm-start", "--socket", path, "--parent", str(os.getpid())],
                                   env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    os.environ[ENV] = path
    return process, directory


def stop(handle) -> None:
    """End the run's server (its running children with it) and remove its socket."""
    import shutil
    import subprocess

    if not handle:
        return
    process, directory = handle
    os.environ.pop(ENV, None)
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
    shutil.rmtree(directory, ignore_errors=True)


def serve_command(socket_path: str, parent: int, run) -> None:
    """`forgetmap warm-start`: serve the run's jobs (started by the Snakefile when a local CPU run starts);
    `run`: the CLI's entry, which each forked job calls."""
    serve(socket_path, parent, run)
