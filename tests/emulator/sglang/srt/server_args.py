"""Server arguments, parsed the way sglang 0.5.23 does it.

`prepare_server_args(argv)` builds an ArgumentParser(prog="sglang serve"), calls
`ServerArgs.add_cli_args(parser)` and `parser.parse_args(argv)`: tooling introspects the CLI by
intercepting that call, so the flow must stay the same. Flag names, aliases, defaults and help
texts are copied from the 0.5.23 wheel (srt/arg_groups/fields/*.py); only a subset of the ~300
real flags exists here.
"""

import argparse
import dataclasses
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union, get_args, get_origin

from sglang.srt.function_call.parser_names import TOOL_CALL_PARSER_NAMES
from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES


def human_readable_int(value: str) -> int:
    """Supports standard SI suffixes (k, M, G, T) and IEC suffixes
    (Ki, Mi, Gi, Ti). Suffixes are case-sensitive.

    Decimals are allowed for SI suffixes only.

    Examples:
        '1k' -> 1000      '1M' -> 1000000    '25.6k' -> 25600
        '1Ki' -> 1024     '1Mi' -> 1048576
    """
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'."
                )
            return int(number) * iec[suffix]
        return int(float(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid integer value: {value!r}")


def _arg(default: Any, help: str, **cli: Any) -> Dict[str, Any]:
    """Keyword arguments of a dataclass field carrying its CLI metadata (help, aliases, choices, type_parser)."""
    return {"default": default, "metadata": {"help": help, **cli}}


_REQUIRED = dataclasses.MISSING


class DeprecatedStoreTrueAction(argparse.Action):
    """Deprecated flag that still stores True and prints a warning (as in 0.5.23)."""

    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kw):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        print(
            f"WARNING: '{option_string}' is deprecated and will be removed in a future release."
            f"{replacement}",
            file=sys.stderr,
            flush=True,
        )
        setattr(namespace, self.dest, True)


@dataclass
class ServerArgs:
    # Model and tokenizer
    model_path: str = field(
        metadata={
            "help": "The path of the model weights. This can be a local folder or a Hugging Face repo ID.",
            "aliases": ["--model"],
        }
    )
    tokenizer_path: Optional[str] = field(**_arg(None, "The path of the tokenizer."))
    load_format: str = field(**_arg("auto", "The format of the model weights to load."))
    model_loader_extra_config: str = field(**_arg(
        "{}",
        "Extra config for model loader. This will be passed to the model loader corresponding to "
        "the chosen load_format. For load_format=presharded, JSON may include presharded_path "
        "(target cache root), draft_presharded_path (draft cache root), max_file_bytes, "
        "hash_num_threads, and verify_on_load.",
    ))
    trust_remote_code: bool = field(**_arg(
        False,
        "Whether or not to allow for custom models defined on the Hub in their own modeling files.",
    ))
    context_length: Optional[int] = field(**_arg(
        None,
        "The model's maximum context length. Defaults to None (will use the value from the "
        "model's config.json instead).\n\n" + (human_readable_int.__doc__ or ""),
        type_parser=human_readable_int,
    ))
    is_embedding: bool = field(**_arg(False, "Whether to use a CausalLM as an embedding model."))
    revision: Optional[str] = field(**_arg(
        None,
        "The specific model version to use. It can be a branch name, a tag name, or a commit id. "
        "If unspecified, will use the default version.",
    ))
    download_dir: Optional[str] = field(**_arg(None, "Model download directory for huggingface."))
    dtype: str = field(**_arg(
        "auto",
        "Data type for model weights and activations.",
        choices=["auto", "half", "float16", "bfloat16", "float", "float32"],
    ))
    kv_cache_dtype: str = field(**_arg("auto", 'Data type for kv cache storage. "auto" will use model data type.'))
    quantization: Optional[str] = field(**_arg(None, "The quantization method."))
    served_model_name: Optional[str] = field(**_arg(
        None, "Override the model name returned by the v1/models endpoint in OpenAI API server."
    ))
    chat_template: Optional[str] = field(**_arg(
        None,
        "The buliltin chat template name or the path of the chat template file. "
        "This is only used for OpenAI-compatible API server.",
    ))
    # HTTP server
    host: str = field(**_arg("127.0.0.1", "The host of the HTTP server."))
    port: int = field(**_arg(30000, "The port of the HTTP server."))
    skip_server_warmup: bool = field(**_arg(False, "If set, skip warmup."))
    api_key: Optional[str] = field(**_arg(
        None, "Set API key of the server. It is also used in the OpenAI API compatible server."
    ))
    tokenizer_worker_num: int = field(**_arg(1, "The worker num of the tokenizer manager."))
    stream_interval: int = field(**_arg(
        1,
        "The interval (or buffer size) for streaming in terms of the token length. A smaller value "
        "makes streaming smoother, while a larger value makes the throughput higher",
    ))
    enable_cache_report: bool = field(**_arg(
        False, "Return number of cached tokens in usage.prompt_tokens_details for each openai request."
    ))
    # Memory and scheduling
    mem_fraction_static: Optional[float] = field(**_arg(
        None,
        "The fraction of the memory used for static allocation (model weights and KV cache memory "
        "pool). Use a smaller value if you see out-of-memory errors.",
    ))
    max_running_requests: Optional[int] = field(**_arg(None, "The maximum number of running requests."))
    chunked_prefill_size: Optional[int] = field(**_arg(
        None,
        "The maximum number of tokens in a chunk for the chunked prefill. Setting this to -1 means "
        "disabling chunked prefill.",
    ))
    schedule_policy: str = field(**_arg(
        "fcfs",
        "The scheduling policy of the requests.",
        choices=["lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn",
                 "shortest-prefill-first"],
    ))
    disable_radix_cache: bool = field(**_arg(False, "Disable RadixAttention for prefix caching."))
    disable_overlap_schedule: bool = field(**_arg(
        False, "Disable the overlap scheduler, which overlaps the CPU scheduler with GPU model worker."
    ))
    # Device and runtime
    device: Optional[str] = field(**_arg(
        None,
        "The device to use ('cuda', 'xpu', 'hpu', 'npu', 'cpu', 'musa'). Defaults to "
        "auto-detection if not specified.",
    ))
    base_gpu_id: int = field(**_arg(
        0,
        "The base GPU ID to start allocating GPUs from. Useful when running multiple instances on "
        "the same machine.",
    ))
    random_seed: Optional[int] = field(**_arg(None, "The random seed."))
    watchdog_timeout: float = field(**_arg(
        300,
        "Set watchdog timeout in seconds. If a forward batch takes longer than this, the server "
        "will crash to prevent hanging.",
    ))
    attention_backend: Optional[str] = field(**_arg(None, "Choose the kernels for attention layers."))
    cuda_graph_max_bs_decode: Optional[int] = field(**_arg(
        None, "Maximum batch size captured for the decode cuda graph."
    ))
    cuda_graph_bs_decode: Optional[List[int]] = field(**_arg(
        None, "Explicit list of batch sizes to capture for the decode cuda graph.",
        type_parser=int, nargs="+",
    ))
    disable_cuda_graph_padding: bool = field(**_arg(
        False,
        "Disable cuda graph when padding is needed. Still uses cuda graph when padding is not needed.",
    ))
    enable_torch_compile: bool = field(**_arg(False, "Optimize the model with torch.compile. Experimental feature."))
    torch_compile_max_bs: int = field(**_arg(32, "Set the maximum batch size when using torch compile."))
    disable_custom_all_reduce: bool = field(**_arg(
        False, "Disable the custom all-reduce kernel and fall back to NCCL."
    ))
    # Parallelism
    tp_size: int = field(**_arg(1, "The tensor parallelism size.", aliases=["--tensor-parallel-size"]))
    pp_size: int = field(**_arg(1, "The pipeline parallelism size.", aliases=["--pipeline-parallel-size"]))
    dp_size: int = field(**_arg(
        1, "The number of data-parallel replicas of the model.", aliases=["--data-parallel-size"]
    ))
    ep_size: int = field(**_arg(
        1, "The expert parallelism size.", aliases=["--expert-parallel-size", "--ep"]
    ))
    dist_init_addr: Optional[str] = field(**_arg(
        None,
        "The host address for initializing distributed backend (e.g., `192.168.0.2:25000`).",
        aliases=["--nccl-init-addr"],
    ))
    nnodes: int = field(**_arg(1, "The number of nodes."))
    node_rank: int = field(**_arg(0, "The node rank."))
    # Observability
    log_level: str = field(**_arg("info", "The logging level of all loggers."))
    log_level_http: Optional[str] = field(**_arg(
        None, "The logging level of HTTP server. If not set, reuse --log-level by default."
    ))
    enable_metrics: bool = field(**_arg(False, "Enable log prometheus metrics."))
    # Registered by hand in add_cli_args (dynamic choices / deprecated actions), like the real one.
    reasoning_parser: Optional[str] = field(default=None, metadata={"manual": True})
    tool_call_parser: Optional[str] = field(default=None, metadata={"manual": True})
    disable_cuda_graph: bool = field(default=False, metadata={"manual": True})
    enable_dp_attention: bool = field(default=False, metadata={"manual": True})

    def __post_init__(self) -> None:
        # 0.5.6 fills these in __post_init__, so they show up in server_args= and /server_info.
        if self.tokenizer_path is None:
            self.tokenizer_path = self.model_path
        if self.served_model_name is None:
            self.served_model_name = self.model_path

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        for f in dataclasses.fields(ServerArgs):
            if not f.metadata.get("manual"):
                _add_field(parser, f)
        reasoning = list(REASONING_PARSER_NAMES)
        parser.add_argument(
            "--reasoning-parser",
            type=str,
            choices=["auto"] + reasoning,
            default=None,
            help="Specify the parser for reasoning models. Use 'auto' to detect from chat template "
            f"or checkpoint metadata. Options include: {reasoning}.",
        )
        tools = list(TOOL_CALL_PARSER_NAMES)
        parser.add_argument(
            "--tool-call-parser",
            type=str,
            choices=["auto"] + tools,
            default=None,
            help="Specify the parser for handling tool-call interactions. Use 'auto' to detect from "
            f"chat template or checkpoint metadata. Options include: {tools}.",
        )
        parser.add_argument(
            "--disable-cuda-graph",
            action=DeprecatedStoreTrueAction,
            new_flag="--cuda-graph-backend-{decode,prefill}=disabled",
            help="Deprecated. Use --cuda-graph-backend-{decode,prefill}=disabled instead.",
        )
        parser.add_argument(
            "--enable-dp-attention",
            action=DeprecatedStoreTrueAction,
            new_flag="--attn-dp-size",
            help="Deprecated. Use --attn-dp-size instead.",
        )

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "ServerArgs":
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{n: getattr(args, n) for n in names})

    def url(self) -> str:
        """Base URL the warmup uses to reach this server (wildcards -> loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def _scalar_type(tp: Any) -> Any:
    """Unwrap Optional[X] -> X."""
    if get_origin(tp) is Union:
        non_none = [a for a in get_args(tp) if a is not type(None)]
        if len(non_none) == 1:
            return non_none[0]
    return tp


def _add_field(parser: argparse.ArgumentParser, f: "dataclasses.Field[Any]") -> None:
    """Mirror of arg_utils.add_cli_args_from_dataclass for the types used here."""
    meta = f.metadata
    names: List[str] = ["--" + f.name.replace("_", "-")] + list(meta.get("aliases", []))
    kwargs: Dict[str, Any] = {"help": meta.get("help", "")}
    if f.name != names[0][2:].replace("-", "_"):
        kwargs["dest"] = f.name
    inner = _scalar_type(f.type)
    if inner is bool:
        kwargs.update(action="store_true", default=f.default)
        parser.add_argument(*names, **kwargs)
        return
    kwargs["type"] = meta.get("type_parser") or (inner if inner in (int, float) else str)
    if meta.get("choices"):
        kwargs["choices"] = meta["choices"]
    if meta.get("nargs"):
        kwargs["nargs"] = meta["nargs"]
    if f.default is _REQUIRED:
        kwargs["required"] = True
    else:
        kwargs["default"] = f.default
    parser.add_argument(*names, **kwargs)


def _log_format(prefix: str = "") -> str:
    maybe_ms = ".%(msecs)03d" if os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true") else ""
    return f"[%(asctime)s{maybe_ms}{prefix}] %(message)s"


def configure_logger(server_args: ServerArgs, prefix: str = "") -> None:
    """Same format as sglang: `[YYYY-mm-dd HH:MM:SS{.mmm}{ TP0}] message` on stderr."""
    level = getattr(logging, server_args.log_level.upper(), logging.INFO)
    logging.basicConfig(
        level=level, format=_log_format(prefix), datefmt="%Y-%m-%d %H:%M:%S", force=True
    )


def prepare_server_args(argv: List[str]) -> ServerArgs:
    """
    Prepare the server arguments from the command line arguments.

    Args:
        args: The command line arguments. Typically, it should be `sys.argv[1:]`
            to ensure compatibility with `parse_args` when no arguments are passed.

    Returns:
        The server arguments.
    """
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    raw_args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, raw_args.log_level.upper(), logging.INFO),
        format=_log_format(),
        datefmt="%Y-%m-%d %H:%M:%S",
        force=True,
    )
    return ServerArgs.from_cli_args(raw_args)
