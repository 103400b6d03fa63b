"""CLIP tokenizer: vocabulary construction from CLIP's BPE file and equality with transformers.CLIPTokenizer."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from sdlite.errors import SdliteError
from sdlite.tokenizer import (
    CLIPTokenizer,
    PromptTruncatedWarning,
    build_clip_vocab_files,
    byte_alphabet,
    find_clip_bpe,
)

TRICKY = [
    "a photo of a cat",
    "  Hello,   WORLD!!  ",
    "it's 2024 — naïve café's 123abc",
    "<|startoftext|>x<|endoftext|>",
    "emoji 🐱🚀 and 日本語テキスト",
    "don't!'s''ll I'M",
    "a\tb\nc",
    "",
    "Ünïcödé ÀÉÎ ǅ ß ｆｕｌｌ",
    "1,000.5% e\u0301",
    "x" * 300,
]


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clip-tokenizer")
    build_clip_vocab_files(find_clip_bpe(), out)
    return out


@pytest.fixture(scope="module")
def tok(vocab_dir: Path) -> CLIPTokenizer:
    return CLIPTokenizer.from_folder(vocab_dir)


def test_built_vocab_is_clips(vocab_dir: Path) -> None:
    vocab = json.loads((vocab_dir / "vocab.json").read_text(encoding="utf-8"))
    assert len(vocab) == 49408
    assert sorted(vocab.values()) == list(range(49408))
    assert vocab["!"] == 0 and vocab["<|startoftext|>"] == 49406 and vocab["<|endoftext|>"] == 49407
    assert vocab["a</w>"] == 320 and vocab["cat</w>"] == 2368 and vocab["!</w>"] == 256
    merges = (vocab_dir / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert merges[0] == "#version: 0.2" and merges[1] == "i n" and len(merges) == 1 + 48894


def test_byte_alphabet_is_a_bijection_of_256_chars() -> None:
    chars = byte_alphabet()
    assert len(chars) == len(set(chars)) == 256
    assert chars[0] == "!" and chars[ord("~") - ord("!")] == "~" and chars[-1] == chr(256 + 67)


def test_a_photo_of_a_cat(tok: CLIPTokenizer) -> None:
    ids = tok("a photo of a cat")
    assert ids.shape == (1, 77) and ids.dtype == np.int32
    assert ids[0, :7].tolist() == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert (ids[0, 7:] == 49407).all()
    assert tok.tokenize("A photo of a CAT") == ["a</w>", "photo</w>", "of</w>", "a</w>", "cat</w>"]
    assert tok.decode(ids[0]) == "a photo of a cat"


@pytest.mark.parametrize("text", TRICKY)
def test_equals_transformers(vocab_dir: Path, tok: CLIPTokenizer, text: str) -> None:
    from transformers import CLIPTokenizer as HFTokenizer

    hf = HFTokenizer.from_pretrained(str(vocab_dir))
    expected = hf(text, padding="max_length", max_length=77, truncation=True)["input_ids"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PromptTruncatedWarning)
        assert tok(text)[0].tolist() == expected


def test_truncation_warns_with_dropped_text(tok: CLIPTokenizer) -> None:
    text = " ".join(["cat"] * 75 + ["dog", "bird"])
    with pytest.warns(PromptTruncatedWarning, match=r"longer than 77 tokens.*dropped: 'dog bird'"):
        enc = tok.encode(text)
    assert enc.num_tokens == 75 and enc.dropped_text == "dog bird"
    assert enc.ids[0] == 49406 and enc.ids[-1] == 49407 and (enc.ids[1:76] == 2368).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exactly 75 tokens: no warning
        assert tok.encode(" ".join(["cat"] * 75)).dropped_text is None


def test_batch_of_prompts(tok: CLIPTokenizer) -> None:
    ids = tok(["", "a cat"])
    assert ids.shape == (2, 77)
    assert ids[0, :2].tolist() == [49406, 49407] and ids[1, :4].tolist() == [49406, 320, 2368, 49407]


def test_missing_files_and_bad_bpe_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(SdliteError, match=r"^tokenizer file not found: .*vocab.json$"):
        CLIPTokenizer.from_folder(tmp_path)
    bad = tmp_path / "bad.txt.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(SdliteError, match="cannot read CLIP BPE file"):
        build_clip_vocab_files(bad, tmp_path / "out")


def test_find_clip_bpe_explains_how_to_fetch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(SdliteError, match=r"run `python scripts/fetch_clip_bpe.py`"):
        find_clip_bpe()
