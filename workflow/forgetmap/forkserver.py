"""Warm start: forgetmap commands run in processes forked from one that has imported torch already.

Every fine-tuning and scoring job is a fresh process, and on the demo importing torch and transformers
is most of such a job (about 4 of 6 s). On a local run the Snakefile starts one server (`forgetmap
serve`); it imports those libraries once and forks a child per command. The `forgetmap` client sends
the server its arguments, working directory and environment, hands over its stdin, stdout and stderr,
waits, and exits with the child's status; if the client dies (Snakemake cancels the job) its child dies
with it. A child is a copy of the server taken before any command ran, so nothing passes from one job
to the next.

The client runs the command itself wherever no server answers (a SLURM job, a shell outside the
workflow, a server gone) and wherever the server cannot run it as a fresh process would: the process
start settings (thread counts, hash seed, PYTHONPATH, interpreter, the forgetmap checkout) differ from
the server's. The server is a CPU-only device: the Snakefile starts none where a GPU could be used, as
CUDA cannot be used in a child forked after the parent touched it.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback

ADDRESS = "FORGETMAP_FORKSERVER"  # the environment variable that names the server's socket
# what a process fixes when it starts, so a child of the server must have been started with the same
PROCESS_START = ("PYTHONHASHSEED", "PYTHONPATH", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# a fresh job's process start for a rule with one thread: the Snakefile's shell prefix and what
# Snakemake's shell exports for `threads: 1`; the server starts with it
ONE_THREAD_JOB = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
PRELOAD = ("torch", "numpy", "pandas", "pyarrow.parquet", "scipy.stats", "transformers",
           "transformers.models.llama.modeling_llama", "forgetmap.models", "forgetmap.train", "forgetmap.score",
           "forgetmap.correctness", "forgetmap.matrix", "forgetmap.lowrank", "forgetmap.plots",
           "forgetmap.predict.protocol", "forgetmap.mitigation.replay", "forgetmap.mitigation.evaluate")
HEADER = struct.Struct("!I")

log = logging.getLogger("forgetmap.forkserver")


def _identity() -> dict:
    """What a client's command must share with the server to run in one of its children."""
    from . import __file__ as package

    return {"executable": os.path.realpath(sys.executable), "package": os.path.realpath(package),
            **{name: os.environ.get(name) for name in PROCESS_START}}


def _send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    payload = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [HEADER.pack(len(payload))], fds)
    else:
        sock.sendall(HEADER.pack(len(payload)))
    sock.sendall(payload)


def _receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One message (and the descriptors sent with it); None when the peer closed first."""
    if max_fds:
        head, fds, _, _ = socket.recv_fds(sock, HEADER.size, max_fds)
    else:
        head, fds = sock.recv(HEADER.size), []
    while head and len(head) < HEADER.size:
        more = sock.recv(HEADER.size - len(head))
        if not more:
            break
        head += more
    if len(head) < HEADER.size:
        return None, fds
    (size,) = HEADER.unpack(head)
    payload = b""
    while len(payload) < size:
        more = sock.recv(size - len(payload))
        if not more:
            return None, fds
        payload += more
    return json.loads(payload), fds


# ---------------------------------------------------------------------------------------------- client

def request(argv: list[str], address: str | None = None) -> int | None:
    """Run `forgetmap argv` in a child of the server at `address`: its exit status, or None when this
    process must run the command itself (no server there, one that cannot run it as a fresh process, or
    one that ended before starting it)."""
    address = address or os.environ.get(ADDRESS)
    if not address:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
    except OSError:
        sock.close()
        return None
    with sock:
        sys.stdout.flush()
        sys.stderr.flush()
        message = {"argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ), "identity": _identity()}
        try:
            _send(sock, message, [0, 1, 2])
            started, _ = _receive(sock)
        except OSError:
            started = None
        if started is None or "declined" in started:  # nothing ran: run it here
            return None
        try:
            reply, _ = _receive(sock)
        except OSError:
            reply = None
    if reply is None:
        print(f"forgetmap: error: the warm-start server ({address}) ended before `{' '.join(argv[:1])}` "
              "finished; its log is .snakemake/forgetmap-server.log", file=sys.stderr)
        return 1
    status = reply["status"]
    return status if status >= 0 else 128 - status  # killed by signal n: the shell's 128 + n


# ---------------------------------------------------------------------------------------------- server

def preload(modules=PRELOAD) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # an optional extra; the child imports what it needs itself
            log.info("not preloaded: %s (%s)", name, exc)


def serve(address: str, parent: int | None = None, run=None, modules=PRELOAD) -> None:
    """Answer requests at `address` until SIGTERM or until `parent` (the Snakemake process) is gone.

    `run(argv) -> int` runs one command in a child (default: the CLI's dispatch)."""
    if run is None:
        from .cli import dispatch as run
    preload(modules)
    identity = _identity()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".part")  # appears under its name only once it listens
    os.chmod(address + ".part", 0o600)
    listener.listen(64)
    os.replace(address + ".part", address)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    stopping = []
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.set_wakeup_fd(wake_w)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    log.info("serving at %s (pid %d)", address, os.getpid())
    try:
        while not stopping and (parent is None or os.getppid() == parent):
            for key, _ in selector.select(timeout=1.0):
                if key.fileobj is listener:
                    conn, _ = listener.accept()
                    pid = _start(conn, identity, run, closing=(listener, wake_r, wake_w))
                    if pid is None:
                        conn.close()
                    else:
                        children[pid] = conn
                else:
                    os.read(wake_r, 4096)
            _reap(children)
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        listener.close()
        if os.path.exists(address):
            os.unlink(address)
        log.info("stopped")


def _start(conn: socket.socket, identity: dict, run, closing) -> int | None:
    """Fork a child for the request on `conn`; None when there was nothing to run."""
    conn.settimeout(10)
    try:
        message, fds = _receive(conn, max_fds=3)
    except (OSError, ValueError) as exc:
        log.info("a request could not be read: %s", exc)
        return None
    conn.settimeout(None)
    try:  # the client's descriptors are the child's alone: the server closes its copies whatever happens
        if message is None or len(fds) != 3:
            return None
        differs = sorted(k for k, v in identity.items() if message["identity"].get(k) != v)
        if differs:
            log.info("declined %s: %s differ", message["argv"][:1], ", ".join(differs))
            try:
                _send(conn, {"declined": differs})
            except OSError:  # the client is gone: nothing to tell it
                pass
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                for item in closing:
                    item.close() if hasattr(item, "close") else os.close(item)
                _child(conn, fds, message, run)
            finally:
                os._exit(70)  # _child exits itself; reaching here means it could not start
    finally:
        for fd in fds:
            os.close(fd)
    log.info("pid %d: forgetmap %s", pid, " ".join(message["argv"][:1]))
    try:
        _send(conn, {"started": pid})
    except OSError:  # the client is gone already; its child notices too
        pass
    return pid


def _child(conn: socket.socket, fds: list[int], message: dict, run) -> None:
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.chdir(message["cwd"])
    os.environ.clear()
    os.environ.update(message["env"])
    tempfile.tempdir = None  # TMPDIR as the job has it
    for handler in logging.root.handlers[:]:  # the server's log is not the job's
        logging.root.removeHandler(handler)
    sys.argv = ["forgetmap", *message["argv"]]
    threading.Thread(target=_die_with, args=(conn,), daemon=True).start()
    try:
        status = run(message["argv"])
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(status or 0))


def _die_with(conn: socket.socket) -> None:
    """The client is the job Snakemake watches: when it goes, so does its command."""
    try:
        conn.recv(1)
    finally:
        os.kill(os.getpid(), signal.SIGKILL)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        try:
            _send(conn, {"status": code})
        except OSError:  # the client is gone
            pass
        conn.close()


# ---------------------------------------------------------------------------------- the workflow's side

def gpu_present() -> bool:
    """Whether this machine has a GPU a job could touch (NVIDIA or ROCm device nodes)."""
    import glob

    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/kfd"))


def start(log_path: str) -> tuple[subprocess.Popen, str] | None:
    """Start a server for this process (the Snakemake run) and point its jobs at it via the environment:
    the server's process handle and its socket; None when `forgetmap` cannot be found."""
    import shutil

    command = shutil.which("forgetmap")
    if command is None:
        return None
    directory = tempfile.mkdtemp(prefix="forgetmap-")
    address = os.path.join(directory, "server.sock")
    env = {**os.environ, **ONE_THREAD_JOB, "TOKENIZERS_PARALLELISM": "false"}
    env.pop(ADDRESS, None)
    with open(log_path, "w") as log_file:
        process = subprocess.Popen([command, "serve", "--socket", address, "--parent", str(os.getpid())],
                                   env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                                   start_new_session=True)
    os.environ[ADDRESS] = address
    return process, address


def stop(server: tuple[subprocess.Popen, str] | None, timeout: float = 10.0) -> None:
    if server is None:
        return
    process, address = server
    os.environ.pop(ADDRESS, None)
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for path in (address, address + ".part"):
        if os.path.exists(path):
            os.unlink(path)
    os.rmdir(os.path.dirname(address))


def serve_command(socket_path: str, parent: int | None = None) -> None:
    serve(socket_path, parent)
