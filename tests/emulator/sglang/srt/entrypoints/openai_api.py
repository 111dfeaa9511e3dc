"""Canned responses with sglang's JSON shapes (no model runs), streamed or not.

Generation takes SGLANG_EMULATOR_TOKEN_DELAY seconds per generated token (default 0): a stream
sends one server-sent event per token, a plain request answers after all of them. Long
streams are what a careless restart cuts.
"""

import os
import re
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Tuple

from sglang.srt.server_args import ServerArgs

REASONING = "The user asks a question. Let me think step by step about a short, correct answer."
ANSWER = "This is a response from the SGLang emulator."
COMPLETION = " Paris. It is known for the Eiffel Tower."

# (seconds to wait before it, event payload) for one server-sent event
Event = Tuple[float, Dict[str, Any]]


def token_delay() -> float:
    try:
        return max(0.0, float(os.environ.get("SGLANG_EMULATOR_TOKEN_DELAY", "") or 0.0))
    except ValueError:
        return 0.0


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


def _pieces(text: str) -> List[str]:
    """Word-sized tokens whose concatenation is `text`."""
    return re.findall(r"\s*\S+|\s+$", text)


def _completion_words(max_new: int) -> List[str]:
    """`max_new` tokens: the canned completion, repeated (as if ignore_eos were set)."""
    words = COMPLETION.split()
    return [words[i % len(words)] for i in range(max(1, max_new))]


def _meta(text: str, max_new: int, produced: int, finished: bool, rid: str) -> Dict[str, Any]:
    return {
        "id": rid,
        "finish_reason": {"type": "length", "length": max_new} if finished else None,
        "prompt_tokens": _tokens(text),
        "weight_version": "default",
        "completion_tokens": produced,
        "cached_tokens": 0,
        "e2e_latency": round(produced * token_delay(), 4) or 0.01,
    }


def _max_new(params: Dict[str, Any]) -> int:
    return int(params.get("max_new_tokens") or 16)


def _one_generation(text: str, params: Dict[str, Any]) -> Dict[str, Any]:
    max_new = _max_new(params)
    words = _completion_words(max_new)
    return {"text": " " + " ".join(words),
            "meta_info": _meta(text, max_new, len(words), True, uuid.uuid4().hex)}


def _prompts(body: Dict[str, Any]) -> List[str]:
    text = body.get("text", "")
    return [str(t) for t in text] if isinstance(text, list) else [str(text)]


def generate_seconds(body: Dict[str, Any]) -> float:
    """How long a non-streamed /generate takes: every token of every prompt."""
    params = body.get("sampling_params") or {}
    return token_delay() * _max_new(params) * len(_prompts(body))


def generate_response(body: Dict[str, Any]) -> Any:
    """POST /generate: one result, or a list when `text` is a batch."""
    params = body.get("sampling_params") or {}
    text = body.get("text", "")
    if isinstance(text, list):
        return [_one_generation(str(t), params) for t in text]
    return _one_generation(str(text), params)


def generate_events(body: Dict[str, Any]) -> Iterator[Event]:
    """POST /generate with "stream": true: one event per token, `text` cumulative (sglang's
    default; --incremental-streaming-output is not emulated); a batch adds `index`."""
    params = body.get("sampling_params") or {}
    max_new = _max_new(params)
    prompts = _prompts(body)
    for index, prompt in enumerate(prompts):
        words = _completion_words(max_new)
        rid = uuid.uuid4().hex
        for n in range(1, len(words) + 1):
            event: Dict[str, Any] = {
                "text": " " + " ".join(words[:n]),
                "output_ids": list(range(n)),
                "meta_info": _meta(prompt, max_new, n, n == len(words), rid),
            }
            if len(prompts) > 1:
                event["index"] = index
            yield token_delay(), event


def _message(server_args: ServerArgs) -> Dict[str, Any]:
    """With a reasoning parser the <think> part is split out; without it, it stays in content."""
    if server_args.reasoning_parser:
        return {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING,
                "tool_calls": None}
    content = f"<think>\n{REASONING}\n</think>\n\n{ANSWER}"
    return {"role": "assistant", "content": content, "reasoning_content": None, "tool_calls": None}


def _prompt_text(body: Dict[str, Any]) -> str:
    messages: List[Dict[str, Any]] = body.get("messages") or []
    return " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))


def _chat_pieces(server_args: ServerArgs, body: Dict[str, Any]) -> Tuple[List[Tuple[str, str]], str]:
    """(field, token) pairs of the answer, cut at max_tokens, and the finish reason."""
    message = _message(server_args)
    pieces = [("reasoning_content", p) for p in _pieces(message["reasoning_content"] or "")]
    pieces += [("content", p) for p in _pieces(message["content"])]
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    if limit and int(limit) < len(pieces):
        return pieces[:int(limit)], "length"
    return pieces, "stop"


def chat_seconds(server_args: ServerArgs, body: Dict[str, Any]) -> float:
    return token_delay() * len(_chat_pieces(server_args, body)[0])


def chat_completion(server_args: ServerArgs, body: Dict[str, Any]) -> Dict[str, Any]:
    prompt = _prompt_text(body)
    pieces, finish = _chat_pieces(server_args, body)
    message = _message(server_args)
    for field in ("reasoning_content", "content"):
        if message[field] is not None:
            message[field] = "".join(p for f, p in pieces if f == field)
    completion = len(pieces)
    return {
        "id": uuid.uuid4().hex,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or server_args.served_model_name,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish,
             "matched_stop": None}
        ],
        "usage": {
            "prompt_tokens": _tokens(prompt),
            "total_tokens": _tokens(prompt) + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": None,
        },
    }


def _chunk(rid: str, created: int, model: str, delta: Dict[str, Any],
           finish: Optional[str]) -> Dict[str, Any]:
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                         "matched_stop": None}],
            "usage": None}


def chat_events(server_args: ServerArgs, body: Dict[str, Any]) -> Iterator[Event]:
    """/v1/chat/completions with "stream": true: a first chunk with the role, one chunk per
    token (reasoning_content first when a reasoning parser is set), a last chunk with the
    finish reason, a usage chunk when stream_options.include_usage asks for it."""
    rid, created = uuid.uuid4().hex, int(time.time())
    model = body.get("model") or server_args.served_model_name
    pieces, finish = _chat_pieces(server_args, body)
    yield 0.0, _chunk(rid, created, model, {"role": "assistant", "content": "",
                                            "reasoning_content": None, "tool_calls": None}, None)
    for field, piece in pieces:
        delta = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
        delta[field] = piece
        yield token_delay(), _chunk(rid, created, model, delta, None)
    yield 0.0, _chunk(rid, created, model, {"role": None, "content": None,
                                            "reasoning_content": None, "tool_calls": None}, finish)
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt = _tokens(_prompt_text(body))
        usage = {"prompt_tokens": prompt, "completion_tokens": len(pieces),
                 "total_tokens": prompt + len(pieces), "prompt_tokens_details": None}
        yield 0.0, {"id": rid, "object": "chat.completion.chunk", "created": created,
                    "model": model, "choices": [], "usage": usage}


def models_list(server_args: ServerArgs) -> Dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": server_args.served_model_name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "sglang",
                "root": server_args.model_path,
                "max_model_len": server_args.context_length or 32768,
            }
        ],
    }


def _rank_counts(server_args: ServerArgs, running: int, waiting: int) -> List[Tuple[int, int, int]]:
    """(dp_rank, running, waiting) per DP rank; the emulator puts its requests on rank 0."""
    ranks = max(1, int(getattr(server_args, "dp_size", 1) or 1))
    return [(r, running if r == 0 else 0, waiting if r == 0 else 0) for r in range(ranks)]


def get_load(server_args: ServerArgs, running: int, waiting: int = 0) -> List[Dict[str, Any]]:
    """GET /get_load (0.5.6): one GetLoadReqOutput per DP rank; num_reqs = running + waiting."""
    return [{"rid": None, "http_worker_ipc": None, "dp_rank": rank, "num_reqs": run + wait,
             "num_waiting_reqs": wait, "num_tokens": (run + wait) * 32}
            for rank, run, wait in _rank_counts(server_args, running, waiting)]


def v1_loads(server_args: ServerArgs, running: int, waiting: int, version: str) -> Dict[str, Any]:
    """GET /v1/loads (0.5.23, which has no /get_load): per-DP-rank core load fields."""
    loads = [{"timestamp": time.time(), "dp_rank": rank, "num_running_reqs": run,
              "num_waiting_reqs": wait, "num_used_tokens": (run + wait) * 32,
              "max_running_requests": server_args.max_running_requests or 4096,
              "token_usage": 0.0, "gen_throughput": 0.0}
             for rank, run, wait in _rank_counts(server_args, running, waiting)]
    return {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "version": version, "accelerator": None, "num_accelerators": server_args.tp_size,
            "loads": loads}


def metrics_text(server_args: ServerArgs, running: int = 0, waiting: int = 0) -> str:
    labels = f'model_name="{server_args.served_model_name}",engine_type="unified"'
    values = {"num_running_reqs": running, "num_queue_reqs": waiting}
    lines = []
    for name, kind in (("num_running_reqs", "gauge"), ("num_queue_reqs", "gauge"),
                       ("token_usage", "gauge"), ("prompt_tokens_total", "counter"),
                       ("generation_tokens_total", "counter")):
        lines.append(f"# HELP sglang:{name} emulated")
        lines.append(f"# TYPE sglang:{name} {kind}")
        lines.append(f"sglang:{name}{{{labels}}} {float(values.get(name, 0))}")
    return "\n".join(lines) + "\n"
