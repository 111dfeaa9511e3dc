"""Canned responses with sglang's JSON shapes (no model runs)."""

import time
import uuid
from typing import Any, Dict, List

from sglang.srt.server_args import ServerArgs

REASONING = "The user asks a question. Let me think step by step about a short, correct answer."
ANSWER = "This is a response from the SGLang emulator."
COMPLETION = " Paris. It is known for the Eiffel Tower."


def _tokens(text: str) -> int:
    return max(1, len(text.split()))


def _one_generation(text: str, params: Dict[str, Any]) -> Dict[str, Any]:
    max_new = int(params.get("max_new_tokens") or 16)
    out = " ".join(COMPLETION.split()[:max_new])
    return {
        "text": " " + out,
        "meta_info": {
            "id": uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": max_new},
            "prompt_tokens": _tokens(text),
            "weight_version": "default",
            "completion_tokens": _tokens(out),
            "cached_tokens": 0,
            "e2e_latency": 0.01,
        },
    }


def generate_response(body: Dict[str, Any]) -> Any:
    """POST /generate: one result, or a list when `text` is a batch."""
    params = body.get("sampling_params") or {}
    text = body.get("text", "")
    if isinstance(text, list):
        return [_one_generation(str(t), params) for t in text]
    return _one_generation(str(text), params)


def _message(server_args: ServerArgs) -> Dict[str, Any]:
    """With a reasoning parser the <think> part is split out; without it, it stays in content."""
    if server_args.reasoning_parser:
        return {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING,
                "tool_calls": None}
    content = f"<think>\n{REASONING}\n</think>\n\n{ANSWER}"
    return {"role": "assistant", "content": content, "reasoning_content": None, "tool_calls": None}


def chat_completion(server_args: ServerArgs, body: Dict[str, Any]) -> Dict[str, Any]:
    messages: List[Dict[str, Any]] = body.get("messages") or []
    prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    message = _message(server_args)
    completion = _tokens((message["reasoning_content"] or "") + " " + message["content"])
    return {
        "id": uuid.uuid4().hex,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or server_args.served_model_name,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop",
             "matched_stop": None}
        ],
        "usage": {
            "prompt_tokens": _tokens(prompt),
            "total_tokens": _tokens(prompt) + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": None,
        },
    }


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


def metrics_text(server_args: ServerArgs) -> str:
    labels = f'model_name="{server_args.served_model_name}",engine_type="unified"'
    lines = []
    for name, kind in (("num_running_reqs", "gauge"), ("num_queue_reqs", "gauge"),
                       ("token_usage", "gauge"), ("prompt_tokens_total", "counter"),
                       ("generation_tokens_total", "counter")):
        lines.append(f"# HELP sglang:{name} emulated")
        lines.append(f"# TYPE sglang:{name} {kind}")
        lines.append(f"sglang:{name}{{{labels}}} 0.0")
    return "\n".join(lines) + "\n"
