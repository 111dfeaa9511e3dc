"""The launcher process: subprocesses, uvicorn-like HTTP server, warmup, signals, faults.

Order and wording follow sglang (0.5.6 log wording, 0.5.23 endpoints). The HTTP server is the
stdlib ThreadingHTTPServer; its log lines imitate uvicorn's.
"""

import importlib
import json
import logging
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple

from sglang.srt.emulator_control import (
    crash_after_seconds,
    has_fault,
    leak_shm_files,
    phase_seconds,
)
from sglang.srt.server_args import ServerArgs
from sglang.srt.utils import kill_process_tree
from sglang.version import __version__

if has_fault("import_error"):
    # The real failure: a kernel package missing from the venv, hit while importing the server.
    importlib.import_module("sgl_kernel")
    raise ModuleNotFoundError("No module named 'sgl_kernel'", name="sgl_kernel")

from sglang.srt.entrypoints.engine import Subprocesses, launch_subprocesses  # noqa: E402
from sglang.srt.entrypoints.openai_api import (  # noqa: E402
    Event,
    chat_completion,
    chat_events,
    chat_seconds,
    generate_events,
    generate_response,
    generate_seconds,
    get_load,
    metrics_text,
    models_list,
    v1_loads,
)
from sglang.srt.managers.tokenizer_worker import ESCAPE_CODE  # noqa: E402

logger = logging.getLogger(__name__)

UVICORN_STARTUP_FAILURE = 3
OPEN_PATHS = ("/health", "/health_generate", "/metrics")


def _ts() -> str:
    now = time.time()
    base = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    if os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true"):
        base += f".{int(now * 1000) % 1000:03d}"
    return base


class State:
    """What the request handlers and the background threads share."""

    def __init__(self, server_args: ServerArgs, subs: Subprocesses) -> None:
        self.args = server_args
        self.subs = subs
        self.ready = threading.Event()
        self.shutting_down = threading.Event()
        self.bound = False
        self.lock = threading.Lock()
        self.inflight = 0
        self.running = 0  # generations in progress (what /get_load and /metrics report)
        self.dump_seq = 0
        level = (server_args.log_level_http or server_args.log_level).upper()
        self.http_level = getattr(logging, level, logging.INFO)

    def uvicorn_log(self, level: int, msg: str, stream: Any = None) -> None:
        """uvicorn's `[ts] INFO:     msg` (levelprefix padded to 9 characters)."""
        if level < self.http_level:
            return
        prefix = f"{logging.getLevelName(level)}:".ljust(9)
        print(f"[{_ts()}] {prefix} {msg}", file=stream or sys.stderr, flush=True)

    def dump_hidden_states(self) -> None:
        """Imitates the patched extraction server: one small file per generation."""
        target = os.environ.get("SGLANG_HS_DUMP_DIR")
        if not target:
            return
        with self.lock:
            self.dump_seq += 1
            seq = self.dump_seq
        os.makedirs(target, exist_ok=True)
        path = os.path.join(target, f"hs_{time.time_ns()}_{os.getpid()}_{seq}.pt")
        with open(path, "wb") as fh:
            fh.write(b"PK\x03\x04emulated-hidden-states")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    state: State  # set on the subclass built per server

    # -- plumbing -----------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # access lines are written by _send, in uvicorn's format

    def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        if ctype == "text/plain":
            data = body.encode() if isinstance(body, str) else data
        self.send_response_only(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._access_log(code)

    def _access_log(self, code: int) -> None:
        host, port = self.client_address[:2]
        from http import HTTPStatus

        phrase = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else ""
        self.state.uvicorn_log(
            logging.INFO,
            f'{host}:{port} - "{self.command} {self.path} {self.request_version}" {code} {phrase}',
            stream=sys.stdout,
        )

    def _send_events(self, events: Iterable[Event], finished: Callable[[], None]) -> None:
        """A server-sent event stream as uvicorn sends a StreamingResponse: chunked, one
        `data: {json}` event per chunk, `data: [DONE]` last. A client that goes away ends it.
        `finished` runs after the last token, before `[DONE]` goes out."""
        self.send_response_only(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.end_headers()
        self._access_log(200)  # uvicorn logs the access line when the response starts

        def chunks() -> Iterator[bytes]:
            for delay, payload in events:
                if delay:
                    time.sleep(delay)
                yield b"data: " + json.dumps(payload).encode() + b"\n\n"
            finished()
            yield b"data: [DONE]\n\n"

        try:
            for data in chunks():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client disconnected: sglang aborts the request

    def _running(self) -> Callable[[], None]:
        """Count one generation as running; the returned callable ends it (once)."""
        with self.state.lock:
            self.state.running += 1
        ended = threading.Event()

        def end() -> None:
            with self.state.lock:
                if not ended.is_set():
                    ended.set()
                    self.state.running -= 1
        return end

    def _generation(self, stream: bool, events: Iterable[Event], seconds: float, body: Any) -> None:
        """One generation request, counted as running until its last token. Real sglang frees
        the request in the scheduler before the last chunk reaches the client, so a client
        that has the whole response never sees it counted in /get_load."""
        end = self._running()
        try:
            self.state.dump_hidden_states()
            if stream:
                self._send_events(events, end)
                return
            if seconds:
                time.sleep(seconds)
            payload = body() if callable(body) else body
            end()
            self._send(200, payload)
        finally:
            end()

    def _body(self) -> Dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            out = json.loads(raw or b"{}")
        except ValueError:
            out = {}
        return out if isinstance(out, dict) else {}

    def _authorized(self, path: str) -> bool:
        key = self.state.args.api_key
        if not key or path in OPEN_PATHS:
            return True
        return self.headers.get("authorization", "") == f"Bearer {key}"

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        route = ROUTES.get(path)
        if route is None:
            self._send(404, {"detail": "Not Found"})
            return
        if method not in route[0]:
            self._send(405, {"detail": "Method Not Allowed"})
            return
        if not self._authorized(path):
            self._send(401, {"error": "Unauthorized"})
            return
        with self.state.lock:
            self.state.inflight += 1
        try:
            route[1](self)
        finally:
            with self.state.lock:
                self.state.inflight -= 1

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("GET")

    # -- endpoints ----------------------------------------------------------------------------
    def health(self) -> None:
        ok = self.state.ready.is_set() and not self.state.shutting_down.is_set()
        self._send(200 if ok else 503, b"", "text/plain")

    def server_info(self) -> None:
        if self.path.startswith("/get_server_info"):
            logger.warning(
                "Endpoint '/get_server_info' is deprecated and will be removed in a future "
                "version. Please use '/server_info' instead."
            )
        info = self.state.args.to_dict()
        info["internal_states"] = [
            {"max_total_num_tokens": i.get("max_total_num_tokens"), "last_gen_throughput": 0.0}
            for i in self.state.subs.infos[:1]
        ]
        info["version"] = __version__
        self._send(200, info)

    def model_info(self) -> None:
        if self.path.startswith("/get_model_info"):
            logger.warning(
                "Endpoint '/get_model_info' is deprecated and will be removed in a future "
                "version. Please use '/model_info' instead."
            )
        a = self.state.args
        self._send(200, {
            "model_path": a.model_path,
            "served_model_name": a.served_model_name,
            "tokenizer_path": a.tokenizer_path,
            "is_generation": not a.is_embedding,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": a.load_format,
            "reasoning_parser": a.reasoning_parser,
            "tool_call_parser": a.tool_call_parser,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
        })

    def v1_models(self) -> None:
        self._send(200, models_list(self.state.args))

    def generate(self) -> None:
        body = self._body()
        self._generation(bool(body.get("stream")), generate_events(body), generate_seconds(body),
                         lambda: generate_response(body))

    def chat(self) -> None:
        body = self._body()
        args = self.state.args
        self._generation(bool(body.get("stream")), chat_events(args, body), chat_seconds(args, body),
                         lambda: chat_completion(args, body))

    def get_load(self) -> None:
        """0.5.6's /get_load (0.5.23 replaced it by /v1/loads; both are served here)."""
        self._send(200, get_load(self.state.args, self.state.running))

    def v1_loads(self) -> None:
        self._send(200, v1_loads(self.state.args, self.state.running, 0, __version__))

    def metrics(self) -> None:
        if not self.state.args.enable_metrics:
            self._send(404, {"detail": "Not Found"})
            return
        self._send(200, metrics_text(self.state.args, self.state.running), "text/plain")


ROUTES = {
    "/health": (("GET",), Handler.health),
    "/health_generate": (("GET",), Handler.health),
    "/server_info": (("GET",), Handler.server_info),
    "/get_server_info": (("GET",), Handler.server_info),
    "/model_info": (("GET",), Handler.model_info),
    "/get_model_info": (("GET",), Handler.model_info),
    "/v1/models": (("GET",), Handler.v1_models),
    "/generate": (("POST",), Handler.generate),
    "/v1/chat/completions": (("POST",), Handler.chat),
    "/metrics": (("GET",), Handler.metrics),
    "/get_load": (("GET",), Handler.get_load),
    "/v1/loads": (("GET",), Handler.v1_loads),
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # uvicorn sets SO_REUSEADDR too; a live listener still blocks

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse DNS lookup (getfqdn); uvicorn does not, and
        # without DNS it delays "Uvicorn running on" by seconds.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = port


def _make_server(server_args: ServerArgs, state: State) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"state": state})
    family = socket.AF_INET6 if ":" in server_args.host else socket.AF_INET
    server_cls = type("Server", (_Server,), {"address_family": family})
    return server_cls((server_args.host, server_args.port), handler)


def _bind_error_address(server_args: ServerArgs) -> Tuple[Any, ...]:
    """asyncio reports IPv6 socket addresses as 4-tuples."""
    if ":" in server_args.host:
        return (server_args.host, server_args.port, 0, 0)
    return (server_args.host, server_args.port)


# -- background threads ---------------------------------------------------------------------
def _request(url: str, api_key: Optional[str], body: Optional[Dict[str, Any]] = None) -> int:
    """Like `requests`, urllib honours http_proxy/no_proxy: a proxy breaks the warmup, as in real."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(req, timeout=20) as resp:
        resp.read()
        return resp.status


def _warmup(state: State) -> None:
    """Talks to whoever owns host:port (it might not be us: real sglang has the same flaw)."""
    args = state.args
    url = args.url()
    success = False
    error = ""
    for _attempt in range(120):
        time.sleep(min(1.0, phase_seconds()))
        try:
            success = _request(url + "/model_info", args.api_key) == 200
            break
        except (OSError, urllib.error.URLError) as exc:
            error = repr(exc)
    try:
        if success and not args.skip_server_warmup:
            payload = {
                "text": "The capital city of France is",
                "sampling_params": {"temperature": 0, "max_new_tokens": 8},
            }
            success = _request(url + "/generate", args.api_key, payload) == 200
    except (OSError, urllib.error.URLError) as exc:
        success, error = False, repr(exc)
    if not success:
        if state.bound:
            logger.error("Initialization failed. warmup error: %s", error)
            kill_process_tree(os.getpid())
        return
    state.ready.set()
    logger.info("The server is fired up and ready to roll!")


def _watchdog(state: State) -> None:
    """A child that dies on its own (not during our shutdown) brings the server down."""
    while not state.shutting_down.wait(0.5):
        dead = [i for i, p in enumerate(state.subs.all()) if not p.is_alive()]
        if not dead:
            continue
        time.sleep(0.3)  # a group-wide SIGTERM may still be on its way to us
        if state.shutting_down.is_set():
            return
        idx = dead[0]
        if idx < len(state.subs.schedulers):
            logger.error("Rank %s scheduler is dead. Please check if there are relevant logs.", idx)
        else:
            logger.error("Detokenizer or tokenizer worker process is dead.")
        os.kill(os.getpid(), signal.SIGQUIT)
        return


def _crash_later(state: State) -> None:
    """crash_after fault: rank 0 raises in its event loop after the server became ready."""
    state.ready.wait()
    if state.shutting_down.wait(crash_after_seconds()):
        return
    for info in state.subs.infos[:1]:
        try:
            os.kill(int(info["pid"]), signal.SIGUSR1)
        except (OSError, KeyError, ValueError):
            pass


def _start(target: Any, *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


# -- signals ----------------------------------------------------------------------------------
def _install_sigquit_handler() -> None:
    def launch_phase_sigquit_handler(signum: int, frame: Any) -> None:
        logger.error("Received sigquit from a child process. It usually means the child failed.")
        kill_process_tree(os.getpid())

    signal.signal(signal.SIGQUIT, launch_phase_sigquit_handler)


def _install_sigterm_handler(state: State, server: ThreadingHTTPServer) -> None:
    def drain_and_stop() -> None:
        # Real sglang drains with no timeout unless SGL_FORCE_SHUTDOWN is set.
        force = os.environ.get("SGL_FORCE_SHUTDOWN", "").lower() in ("1", "true")
        while not force and state.inflight > 0:
            time.sleep(0.05)
        server.shutdown()

    def sigterm_handler(signum: int, frame: Any) -> None:
        if state.shutting_down.is_set():
            return
        logger.warning(
            "SIGTERM received. signum=%r frame=%r. "
            "Draining requests and shutting down...",
            signum, frame,
        )
        state.shutting_down.set()
        _start(drain_and_stop)

    if not has_fault("ignore_sigterm"):
        signal.signal(signal.SIGTERM, sigterm_handler)


def _stop_children(subs: Subprocesses, grace: float = 5.0) -> None:
    """SIGTERM the children, then SIGKILL whatever is left of the tree."""
    for proc in subs.all():
        if proc.is_alive():
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except OSError:
                pass
    deadline = time.monotonic() + grace
    for proc in subs.all():
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
    kill_process_tree(os.getpid(), include_parent=False)


# -- startup pieces -------------------------------------------------------------------------------
def _check_model_path(server_args: ServerArgs) -> None:
    path = server_args.model_path
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise OSError(
            f"{path} does not appear to have a file named config.json. Checkout "
            f"'https://huggingface.co/{path}/tree/None' for available files."
        )


def _spawn_escaped_worker(server: ThreadingHTTPServer) -> None:
    fd = server.socket.fileno()
    proc = subprocess.Popen([sys.executable, "-c", ESCAPE_CODE, str(fd)], pass_fds=(fd,))
    proc.wait()  # the intermediate exits at once; the grandchild lives on in its own session


def _serve_dummy_health(server_args: ServerArgs, state: State) -> None:
    """Nodes with node_rank >= 1 serve only a dummy /health and never print the ready line."""
    state.ready.set()
    host = server_args.host
    shown = f"[{host}]:{server_args.port}" if ":" in host else f"{host}:{server_args.port}"
    try:
        server = _make_server(server_args, state)
    except OSError as exc:
        logger.error("Dummy health check server failed to start: %s", exc)
        server = None
    if server is not None:
        _start(server.serve_forever)
        logger.info("Dummy health check server started in background thread at %s", shown)
    stop = threading.Event()

    def on_sigterm(signum: int, frame: Any) -> None:
        state.shutting_down.set()
        stop.set()

    if not has_fault("ignore_sigterm"):
        signal.signal(signal.SIGTERM, on_sigterm)
    _start(_watchdog, state)
    while not stop.wait(0.2):
        pass
    _stop_children(state.subs)


def _bind_or_exit(server_args: ServerArgs, state: State, warmup: threading.Thread) -> ThreadingHTTPServer:
    pid = os.getpid()
    state.uvicorn_log(logging.INFO, f"Started server process [{pid}]")
    state.uvicorn_log(logging.INFO, "Waiting for application startup.")
    state.uvicorn_log(logging.INFO, "Application startup complete.")
    try:
        return _make_server(server_args, state)
    except OSError as exc:
        state.uvicorn_log(
            logging.ERROR,
            f"[Errno {exc.errno}] error while attempting to bind on address "
            f"{_bind_error_address(server_args)!r}: {(exc.strerror or str(exc)).lower()}",
        )
        state.uvicorn_log(logging.INFO, "Waiting for application shutdown.")
        state.uvicorn_log(logging.INFO, "Application shutdown complete.")
        warmup.join(timeout=2 * phase_seconds() + 0.5)  # it may talk to the port's other owner
        sys.exit(UVICORN_STARTUP_FAILURE)


def _serve(server_args: ServerArgs, state: State, server: ThreadingHTTPServer) -> None:
    state.bound = True
    shown_host = f"[{server_args.host}]" if ":" in server_args.host else server_args.host
    state.uvicorn_log(
        logging.INFO, f"Uvicorn running on http://{shown_host}:{server_args.port} (Press CTRL+C to quit)"
    )
    if has_fault("escape"):
        _spawn_escaped_worker(server)
    _install_sigterm_handler(state, server)
    _start(_watchdog, state)
    if has_fault("crash_after"):
        _start(_crash_later, state)
    server.serve_forever(poll_interval=0.2)
    state.uvicorn_log(logging.INFO, "Shutting down")
    state.uvicorn_log(logging.INFO, "Waiting for application shutdown.")
    state.uvicorn_log(logging.INFO, "Application shutdown complete.")
    state.uvicorn_log(logging.INFO, f"Finished server process [{os.getpid()}]")
    server.server_close()
    _stop_children(state.subs)


def launch_server(server_args: ServerArgs) -> None:
    logger.info("server_args=%r", server_args)
    _check_model_path(server_args)
    _install_sigquit_handler()
    if has_fault("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited across exec by the children
    leak_shm_files("tokenizer")
    subs = launch_subprocesses(server_args)
    state = State(server_args, subs)
    if server_args.node_rank >= 1:
        _serve_dummy_health(server_args, state)
        return
    warmup = _start(_warmup, state)  # started before the bind, as in real sglang
    server = _bind_or_exit(server_args, state, warmup)
    _serve(server_args, state, server)
